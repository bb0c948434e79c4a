package gateway

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCursor(t *testing.T) {
	t.Parallel()
	after, err := parseCursor(cursorOf(42))
	require.NoError(t, err)
	assert.Equal(t, uint64(42), after)
	for _, bad := range []string{"", "!!", cursorOf(0), cursorOf(math.MaxUint64) /* would wrap to the start */, "MTIzfGFiY3xk" /* an older gateway's time|run|id */, "KzQy" /* "+42" */, "MDQy" /* "042" */} {
		_, err := parseCursor(bad)
		assert.ErrorIs(t, err, errCursor, "%q", bad)
	}
}

// FuzzCursor: any cursor a caller sends is refused or names the position
// whose cursor it is.
func FuzzCursor(f *testing.F) {
	for _, seed := range []string{cursorOf(1), cursorOf(1 << 40), "", "MTIzfGFiY3xk", "KzQy", "MDQy", "////"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, c string) {
		after, err := parseCursor(c)
		if err != nil {
			return
		}
		if after == 0 || cursorOf(after) != c {
			t.Fatalf("%q accepted as position %d", c, after)
		}
	})
}
