package gateway

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// The OpenAPI document parses and describes every route the gateway serves.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../docs/openapi.yaml")
	require.NoError(t, err)
	var doc struct {
		OpenAPI string                    `yaml:"openapi"`
		Paths   map[string]map[string]any `yaml:"paths"`
	}
	require.NoError(t, yaml.Unmarshal(data, &doc))
	assert.Equal(t, "3.1.0", doc.OpenAPI)
	src, err := os.ReadFile("gateway.go")
	require.NoError(t, err)
	routes := regexp.MustCompile(`Handle(?:Func)?\("(GET|POST) ([^"]+)"`).FindAllStringSubmatch(string(src), -1)
	require.NotEmpty(t, routes)
	for _, r := range routes {
		methods, ok := doc.Paths[r[2]]
		if assert.True(t, ok, "route %s %s is not in docs/openapi.yaml", r[1], r[2]) {
			_, ok = methods[map[string]string{"GET": "get", "POST": "post"}[r[1]]]
			assert.True(t, ok, "%s %s", r[1], r[2])
		}
	}
}
