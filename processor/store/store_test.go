package store_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/processor/store/memstore"
	"github.com/interlockhq/interlock/processor/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestJetStream(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store {
		return store.NewJetStream(jstest.Client(t, jstest.Server(t)))
	})
}

func TestMemory(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(*testing.T) store.Store { return memstore.New() })
}
