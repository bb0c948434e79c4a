package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor/approvers"
)

// selfSigned writes a certificate for 127.0.0.1 and its key to dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "interlock test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// Attack: tokens and session cookies sniffed on the wire. The gateway
// serves HTTPS when given a certificate (serve --gateway-tls-cert/key,
// gateway --tls-cert/key), and a plain-HTTP request gets no answer from it.
func TestGatewayServesTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	ids := filepath.Join(dir, "identities.yaml")
	require.NoError(t, os.WriteFile(ids, []byte("identities:\n  ada: {tokens: [\""+approvers.Digest("tok")+"\"]}\n"), 0o600))
	gw := "127.0.0.1:" + strconv.Itoa(freePort(t))
	_, stop := serve(t, t.TempDir(), freePort(t), "--identities", ids, "--gateway-listen", gw,
		"--gateway-tls-cert", certFile, "--gateway-tls-key", keyFile)
	defer func() { assert.Equal(t, 0, stop()) }()

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	var resp *http.Response
	require.Eventually(t, func() bool {
		r, err := client.Get("https://" + gw + "/healthz")
		if err != nil {
			return false
		}
		resp = r
		return true
	}, 15*time.Second, 20*time.Millisecond, "the gateway answers over TLS")
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "max-age=31536000", resp.Header.Get("Strict-Transport-Security"))

	plain, err := http.Get("http://" + gw + "/healthz")
	if err == nil {
		plain.Body.Close()
		assert.Equal(t, http.StatusBadRequest, plain.StatusCode, "plain HTTP is not served")
	}

	r := cli(t, "gateway", "--identities", ids, "--tls-cert", certFile)
	assert.Equal(t, exitUsage, r.code, "a certificate without its key")
}
