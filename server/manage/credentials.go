package manage

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math/big"

	"github.com/google/uuid"

	"github.com/heraldrt/herald/storage"
)

// NewApp returns an enabled app with fresh credentials and the default
// options: client events on, subscription_count on, user-authentication
// timeout off.
func NewApp() storage.App {
	return storage.App{
		ID:                randomDigits(7),
		Key:               randomHex(10),
		Secret:            randomHex(10),
		Enabled:           true,
		ClientEvents:      true,
		SubscriptionCount: true,
	}
}

// NewInstance returns an enabled Push instance with a fresh id, secret key and
// VAPID key pair.
func NewInstance() (storage.Instance, error) {
	pub, priv, err := newVAPIDKeys()
	if err != nil {
		return storage.Instance{}, err
	}
	return storage.Instance{
		ID:        uuid.Must(uuid.NewRandomFromReader(rand.Reader)).String(),
		SecretKey: hexUpper(32),
		Enabled:   true,
		VAPID:     storage.VAPIDConfig{PublicKey: pub, PrivateKey: priv},
	}, nil
}

// newVAPIDKeys returns a P-256 key pair for Web Push: the public key as the
// base64url uncompressed point, the private key as the base64url scalar.
func newVAPIDKeys() (public, private string, err error) {
	key, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		return "", "", err
	}
	enc := base64.RawURLEncoding
	return enc.EncodeToString(key.PublicKey().Bytes()), enc.EncodeToString(key.Bytes()), nil
}

// randomHex returns n random bytes as lower-case hex.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (Go 1.24 and later)
	return hex.EncodeToString(b)
}

func hexUpper(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (Go 1.24 and later)
	return fmt.Sprintf("%X", b)
}

func randomDigits(n int) string {
	limit := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n)), nil)
	lowest := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n-1)), nil)
	// rand.Reader never fails (Go 1.24 and later), and the bound is above 0.
	v, _ := rand.Int(rand.Reader, new(big.Int).Sub(limit, lowest))
	return v.Add(v, lowest).String()
}
