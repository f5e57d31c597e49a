// Package beamsauth checks the user JWTs that bind Push devices to users: a
// token the customer's server minted for one user (the Beams server SDKs'
// generateToken), signed with HS256 and the instance's secret key.
package beamsauth

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"
)

// MaxUserIDLength is the longest user id (the sub claim), in characters.
const MaxUserIDLength = 164

// Why a token is refused. The Device API answers the first two and
// ErrExpired with 401, ErrInvalidIssuer with 403 and the rest with 400, as
// the Beams error table does.
var (
	// ErrMissingToken means there is no "Authorization: Bearer <token>" header.
	ErrMissingToken = errors.New("missing bearer token")
	// ErrMalformedToken means the token does not parse, is not HS256, or its
	// signature is not the instance's.
	ErrMalformedToken = errors.New("malformed token")
	// ErrExpired means the token's exp (or nbf) excludes the present.
	ErrExpired = errors.New("token expired")
	// ErrMissingClaim means exp, sub or iss is absent.
	ErrMissingClaim = errors.New("missing claim")
	// ErrInvalidSubject means sub is not 1 to MaxUserIDLength characters,
	// or holds the NUL character.
	ErrInvalidSubject = errors.New("invalid sub claim")
	// ErrInvalidIssuer means iss is not one this instance accepts.
	ErrInvalidIssuer = errors.New("invalid issuer")
)

// MissingClaimError names the required claim a token lacks. It matches
// ErrMissingClaim with errors.Is.
type MissingClaimError struct{ Claim string }

func (e *MissingClaimError) Error() string { return "missing claim: " + e.Claim }

// Is reports whether target is ErrMissingClaim.
func (e *MissingClaimError) Is(target error) bool { return target == ErrMissingClaim }

// Issuer returns the issuer every Beams SDK puts in user tokens for the instance.
func Issuer(instanceID string) string {
	return "https://" + instanceID + ".pushnotifications.pusher.com"
}

// Verifier checks user tokens of one instance.
type Verifier struct {
	InstanceID string
	SecretKey  string
	// ExtraIssuer is accepted besides Issuer(InstanceID) when not empty.
	ExtraIssuer string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// parser pins the algorithm: a token claiming "none", RS256 (with the secret
// as a "public key") or anything else is refused before its signature is
// looked at. Claims are validated by Verify, which needs to tell a missing
// claim (400) from an expired token (401).
var parser = jwt.NewParser(jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), jwt.WithoutClaimsValidation())

// Verify checks the value of an Authorization header and returns the user id
// the token names. Errors wrap one of the Err* values above.
func (v Verifier) Verify(authorization string) (string, error) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", ErrMissingToken
	}
	var claims jwt.RegisteredClaims
	if _, err := parser.ParseWithClaims(token, &claims, func(*jwt.Token) (any, error) {
		return []byte(v.SecretKey), nil
	}); err != nil {
		return "", fmt.Errorf("%w: %v", ErrMalformedToken, err)
	}
	switch {
	case claims.ExpiresAt == nil:
		return "", &MissingClaimError{Claim: "exp"}
	case claims.Subject == "":
		return "", &MissingClaimError{Claim: "sub"}
	case claims.Issuer == "":
		return "", &MissingClaimError{Claim: "iss"}
	case utf8.RuneCountInString(claims.Subject) > MaxUserIDLength:
		return "", fmt.Errorf("%w: %d characters, at most %d allowed", ErrInvalidSubject, utf8.RuneCountInString(claims.Subject), MaxUserIDLength)
	case strings.IndexByte(claims.Subject, 0) >= 0:
		// A user id is stored, and PostgreSQL's text cannot hold NUL.
		return "", fmt.Errorf("%w: it holds the NUL character", ErrInvalidSubject)
	case claims.Issuer != Issuer(v.InstanceID) && (v.ExtraIssuer == "" || claims.Issuer != v.ExtraIssuer):
		return "", fmt.Errorf("%w: %q", ErrInvalidIssuer, claims.Issuer)
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	if err := jwt.NewValidator(jwt.WithTimeFunc(now)).Validate(claims); err != nil {
		return "", fmt.Errorf("%w: %v", ErrExpired, err)
	}
	return claims.Subject, nil
}
