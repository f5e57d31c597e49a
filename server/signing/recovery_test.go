package signing

import "testing"

// A recovery token verifies for the connection, channel and position it was
// made for, and for nothing else: not another socket's, another channel's,
// another position's, another app's, a changed MAC.
func TestRecoveryTokenIsBoundToItsSubscription(t *testing.T) {
	tok := RecoveryToken("secret", "1.2", "private-a", "100-3")
	if pos, ok := VerifyRecoveryToken(tok, "secret", "1.2", "private-a"); !ok || pos != "100-3" {
		t.Fatalf("VerifyRecoveryToken(its own) = %q, %v; want 100-3, true", pos, ok)
	}
	forged := RecoveryToken("secret", "1.2", "private-a", "99-0")
	for name, c := range map[string]struct{ token, secret, socket, channel string }{
		"another socket":           {tok, "secret", "1.3", "private-a"},
		"another channel":          {tok, "secret", "1.2", "private-b"},
		"another app's secret":     {tok, "other", "1.2", "private-a"},
		"an earlier position":      {"99-0." + tok[len("100-3."):], "secret", "1.2", "private-a"},
		"a changed MAC":            {tok[:len(tok)-1] + "0", "secret", "1.2", "private-a"},
		"no MAC":                   {"100-3", "secret", "1.2", "private-a"},
		"no position":              {"." + tok[len("100-3."):], "secret", "1.2", "private-a"},
		"another position's token": {forged[:len("99-0")] + "x" + forged[len("99-0"):], "secret", "1.2", "private-a"},
	} {
		if tok == c.token && name != "another socket" && name != "another channel" && name != "another app's secret" {
			t.Fatalf("%s: the case does not change the token", name)
		}
		if _, ok := VerifyRecoveryToken(c.token, c.secret, c.socket, c.channel); ok {
			t.Errorf("%s: verified", name)
		}
	}
}

// FuzzRecoveryToken: a token verifies exactly when it is the one made for
// its socket, channel and position; nothing a client sends panics.
func FuzzRecoveryToken(f *testing.F) {
	f.Add("1.2", "news", "100-3", "100-3.abc")
	f.Add("", "", "", ".")
	f.Fuzz(func(t *testing.T, socket, channel, position, sent string) {
		want := RecoveryToken("s", socket, channel, position)
		if pos, ok := VerifyRecoveryToken(want, "s", socket, channel); position != "" && !(ok && pos == position) {
			t.Fatalf("its own token did not verify: %q", want)
		}
		if _, ok := VerifyRecoveryToken(sent, "s", socket, channel); ok && sent != RecoveryToken("s", socket, channel, sent[:len(sent)-65]) {
			t.Fatalf("%q verified but is not a token of its position", sent)
		}
	})
}

// The recovery tokens of the WebSocket reference's examples (spec/
// websocket.asyncapi.yaml) are what Herald gives connection 1234.5678 on
// project-3 under the HTTP API's example secret.
func TestRecoveryTokensOfTheReference(t *testing.T) {
	for position, token := range map[string]string{
		"1764194400000-0/KX3Q7MZP2LB6HTF4WCN5RDJYAE": "1764194400000-0/KX3Q7MZP2LB6HTF4WCN5RDJYAE.24b68902cdfa5ad6dffd79718170b69da39caa6903eb0fc57a1fcb52135234ec",
		"1764194400000-3/KX3Q7MZP2LB6HTF4WCN5RDJYAE": "1764194400000-3/KX3Q7MZP2LB6HTF4WCN5RDJYAE.c50e797cb3dbc0b2765392e6d980e422bc41875fb66c941c88202e12aa79f892",
	} {
		if got, ok := VerifyRecoveryToken(token, vectorSecret, "1234.5678", "project-3"); !ok || got != position {
			t.Errorf("the reference's token for %s: %q, %v", position, got, ok)
		}
	}
}
