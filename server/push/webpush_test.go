package push

import (
	"bytes"
	"crypto/ecdh"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/heraldrt/herald/server/push/pushtest"
)

// TestEncryptRFC8291Example encrypts the example of RFC 8291 Appendix A
// with its keys and salt: the message must be the RFC's, byte for byte.
// This checks the hand-written aes128gcm against the specification, not
// against the fake push service's decryption (which mirrors it).
func TestEncryptRFC8291Example(t *testing.T) {
	b64 := func(s string) []byte {
		t.Helper()
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	const (
		plaintext = "When I grow up, I want to be a watermelon"
		// The application server's key pair.
		asPrivate = "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"
		asPublic  = "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8"
		// The user agent's key pair and authentication secret.
		uaPrivate = "q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94"
		uaPublic  = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
		auth      = "BTBZMqHH6r4Tts7J_aSIgg"
		salt      = "DGv6ra1nlYgDCS1FRnbzlw"
		// The message: salt, record size 4096, the server's key, one record.
		message = "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"
	)
	as, err := ecdh.P256().NewPrivateKey(b64(asPrivate))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(as.PublicKey().Bytes(), b64(asPublic)) {
		t.Fatal("the application server's private key does not give the RFC's public key")
	}
	ua, err := ecdh.P256().NewPrivateKey(b64(uaPrivate))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ua.PublicKey().Bytes(), b64(uaPublic)) {
		t.Fatal("the user agent's private key does not give the RFC's public key")
	}
	sub := &Subscription{Endpoint: "https://push.example.net/push/JzLQ3raZJfFBR0aqvOMsLrt54w4rJUsV"}
	sub.Keys.P256dh, sub.Keys.Auth = uaPublic, auth
	got, err := encrypt(sub, []byte(plaintext), as, b64(salt))
	if err != nil {
		t.Fatal(err)
	}
	if want := b64(message); !bytes.Equal(got, want) {
		t.Fatalf("message\n%s\nwant\n%s", base64.RawURLEncoding.EncodeToString(got), message)
	}
}

// Web Push encrypts messages from 0 bytes up to the most one record holds,
// and refuses one byte more.
func TestWebPushMessageSizes(t *testing.T) {
	fake := pushtest.NewWebPush()
	t.Cleanup(fake.Close)
	sub, err := fake.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	s, err := DecodeWebToken(sub.Token())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 14, 26, 4079} {
		msg := []byte(strings.Repeat("m", n))
		body, err := Encrypt(s, msg)
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if got, err := pushtest.Decrypt(sub, body); err != nil || string(got) != string(msg) {
			t.Fatalf("%d bytes: decrypted %d bytes (%v)", n, len(got), err)
		}
	}
	if _, err := Encrypt(s, make([]byte, 4080)); err == nil {
		t.Fatal("a 4080-byte message was accepted")
	}
}

// A web token may be base64 with or without padding.
func TestDecodeWebTokenUnpadded(t *testing.T) {
	sub := `{"endpoint":"https://push.example/x","keys":{"p256dh":"BPk","auth":"au"}}`
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding} {
		s, err := DecodeWebToken(enc.EncodeToString([]byte(sub)))
		if err != nil || s.Endpoint != "https://push.example/x" {
			t.Fatalf("%v: %+v %v", enc == base64.StdEncoding, s, err)
		}
	}
}

// A VAPID token names the subject (a default one when none is configured)
// and the push service's origin, is valid 12 hours, and is reused for 11.
func TestVAPIDToken(t *testing.T) {
	cfg := newVAPID(t)
	cfg.Subject = ""
	w, err := NewWebPush(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	w.now = func() time.Time { return now }
	h1, err := w.vapidHeader("https://push.example/send/abc")
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimPrefix(strings.Split(h1, ",")[0], "vapid t=")
	var claims jwt.MapClaims
	if _, _, err := jwt.NewParser().ParseUnverified(tok, &claims); err != nil {
		t.Fatal(err)
	}
	if claims["sub"] != DefaultVAPIDSubject || claims["aud"] != "https://push.example" || claims["exp"] != float64(now.Add(12*time.Hour).Unix()) {
		t.Fatalf("claims %v", claims)
	}
	now = now.Add(11*time.Hour - time.Second)
	if h2, _ := w.vapidHeader("https://push.example/send/def"); h2 != h1 {
		t.Fatal("the token was not reused within 11 hours")
	}
	now = now.Add(time.Second)
	if h3, _ := w.vapidHeader("https://push.example/send/def"); h3 == h1 {
		t.Fatal("the token was reused after 11 hours")
	}
	cfg.Subject = "mailto:ops@example.com"
	w2, _ := NewWebPush(cfg, nil, nil)
	h, _ := w2.vapidHeader("https://push.example/x")
	claims = jwt.MapClaims{}
	_, _, _ = jwt.NewParser().ParseUnverified(strings.TrimPrefix(strings.Split(h, ",")[0], "vapid t="), &claims)
	if claims["sub"] != "mailto:ops@example.com" {
		t.Fatalf("configured subject: claims %v", claims)
	}
}
