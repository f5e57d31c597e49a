package push

import (
	"bytes"
	"crypto/ecdh"
	"encoding/base64"
	"testing"
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
