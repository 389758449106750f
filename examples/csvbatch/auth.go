package main

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// Authentication.
//
// The API takes "Authorization: Bearer <secret>". -token (or CSVBATCH_TOKEN)
// lists the accepted secrets, comma-separated. An entry "name:secret" names
// its caller, and that name becomes the created_by of the tasks it creates;
// an entry without a colon is the secret of the caller "operator". Secrets
// are at least 16 characters (openssl rand -hex 16 makes a good one).
//
// Without any token the API is open: every request counts as the caller
// "local", the program only binds a loopback address, and it refuses
// requests whose Host header is not a loopback name, so that a web page in
// the user's browser cannot reach the API through DNS rebinding.
//
// The operator page asks for the token once and keeps it in the tab's
// sessionStorage; it sends it as the same bearer header. No cookie is ever
// set, so a cross-site request carries no credentials.

// Caller names: the single-token caller and the open-mode caller.
const (
	defaultCaller = "operator"
	openCaller    = "local"
	minSecretLen  = 16
)

type credential struct {
	name string
	hash [sha256.Size]byte
}

// parseTokens parses the -token value.
func parseTokens(spec string) ([]credential, error) {
	var creds []credential
	seen := map[[sha256.Size]byte]bool{}
	for entry := range strings.SplitSeq(spec, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, secret, named := strings.Cut(entry, ":")
		if !named {
			name, secret = defaultCaller, entry
		}
		if !validCallerName(name) {
			return nil, fmt.Errorf("-token: caller name %q: use 1 to 64 letters, digits, '.', '_', '-' or '@'", name)
		}
		if len(secret) < minSecretLen {
			return nil, fmt.Errorf("-token: the secret of %q is %d characters, want at least %d (try: openssl rand -hex 16)", name, len(secret), minSecretLen)
		}
		h := sha256.Sum256([]byte(secret))
		if seen[h] {
			return nil, fmt.Errorf("-token: the secret of %q is listed twice", name)
		}
		seen[h] = true
		creds = append(creds, credential{name: name, hash: h})
	}
	return creds, nil
}

func validCallerName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			r == '.' || r == '_' || r == '-' || r == '@'
		if !ok {
			return false
		}
	}
	return true
}

// authenticator decides who is calling.
type authenticator struct {
	creds []credential // empty: open mode
}

// caller returns the authenticated caller's name, or an error for the
// client.
func (a *authenticator) caller(r *http.Request) (string, *apiError) {
	if len(a.creds) == 0 {
		if !loopbackHost(r.Host) {
			return "", &apiError{status: http.StatusForbidden, code: "forbidden_host",
				message: "this server has no token and only answers requests addressed to localhost or a loopback IP"}
		}
		return openCaller, nil
	}
	scheme, secret, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return "", errUnauthenticated("missing bearer token: send Authorization: Bearer <token>")
	}
	h := sha256.Sum256([]byte(strings.TrimSpace(secret)))
	name := ""
	for _, c := range a.creds { // no early exit: every request costs the same
		if subtle.ConstantTimeCompare(h[:], c.hash[:]) == 1 {
			name = c.name
		}
	}
	if name == "" {
		return "", errUnauthenticated("invalid bearer token")
	}
	return name, nil
}

func errUnauthenticated(msg string) *apiError {
	return &apiError{status: http.StatusUnauthorized, code: "unauthenticated", message: msg}
}

// loopbackHost reports whether a Host header names this machine.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
