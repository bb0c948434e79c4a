package store

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/interlockhq/interlock/subjects"
)

// ErrSeal means a sealed record copy could not be opened: another key,
// another run's copy, or bytes changed.
var ErrSeal = errors.New("sealed record does not open")

// sealVersion is the first byte of a sealed copy.
const sealVersion = 1

// SealRecord is r sealed for the audit trail (Event.Record): r as JSON,
// not compressed (a compressed copy's length would tell a reader of the
// trail, who may put text of its own into the record, about the rest),
// AES-256-GCM under key (jetstream.IDSigner.RecordKey) with
// a random nonce and "interlock record" NUL run id as additional data, so a
// copy opens only as the record of its own run; base64 of the version byte,
// the 12-byte nonce and the ciphertext with its tag.
func SealRecord(key []byte, r *subjects.Run) (string, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return "", err
	}
	aead, err := recordAEAD(key)
	if err != nil {
		return "", err
	}
	out := make([]byte, 1+aead.NonceSize(), 1+aead.NonceSize()+len(data)+aead.Overhead())
	out[0] = sealVersion
	if _, err := rand.Read(out[1:]); err != nil {
		return "", err
	}
	out = aead.Seal(out, out[1:], data, sealedAD(r.RunID))
	return base64.StdEncoding.EncodeToString(out), nil
}

// OpenRecord opens a copy SealRecord sealed for run; the error matches
// ErrSeal when it is not one.
func OpenRecord(key []byte, run, sealed string) (*subjects.Run, error) {
	raw, err := base64.StdEncoding.DecodeString(sealed)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSeal, err)
	}
	aead, err := recordAEAD(key)
	if err != nil {
		return nil, err
	}
	if len(raw) < 1+aead.NonceSize()+aead.Overhead() || raw[0] != sealVersion {
		return nil, fmt.Errorf("%w: not a version %d copy", ErrSeal, sealVersion)
	}
	nonce, ct := raw[1:1+aead.NonceSize()], raw[1+aead.NonceSize():]
	data, err := aead.Open(nil, nonce, ct, sealedAD(run))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSeal, err)
	}
	var r subjects.Run
	if err := json.Unmarshal(data, &r); err != nil || r.RunID != run {
		return nil, fmt.Errorf("%w: not a record of run %s (%v)", ErrSeal, run, err)
	}
	return &r, nil
}

func recordAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("record key: %w", err)
	}
	return cipher.NewGCM(block)
}

func sealedAD(run string) []byte { return []byte("interlock record\x00" + run) }
