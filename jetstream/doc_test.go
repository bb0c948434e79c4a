package jetstream_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
)

// TestDocListsEveryStreamAndBucket: the package doc names every stream and
// every bucket Provision creates, under the default prefix.
func TestDocListsEveryStreamAndBucket(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	for _, s := range jetstream.Streams {
		assert.Contains(t, string(doc), "INTERLOCK_"+string(s)+" ", "the package doc lists no stream %s", s)
	}
	for _, b := range []string{jetstream.RunsBucket, jetstream.PendingBucket, jetstream.KeysBucket} {
		assert.Contains(t, string(doc), "interlock_"+b+" ", "the package doc lists no bucket %s", b)
	}
}
