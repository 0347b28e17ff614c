package admin_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/txoutbox/outbox/admin"
)

// TestOpenAPIMatchesRoutes fails when a route is served but not in
// docs/openapi.yaml, or described there but not served.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	raw, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string                               `yaml:"openapi"`
		Paths   map[string]map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version %q, want 3.x", doc.OpenAPI)
	}
	var described []string
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if _, ok := op["responses"]; !ok {
				t.Errorf("%s %s has no responses", method, path)
			}
			described = append(described, strings.ToUpper(method)+" "+path)
		}
	}
	served := admin.Routes()
	slices.Sort(described)
	slices.Sort(served)
	for _, r := range served {
		if !slices.Contains(described, r) {
			t.Errorf("served but not in docs/openapi.yaml: %s", r)
		}
	}
	for _, r := range described {
		if !slices.Contains(served, r) {
			t.Errorf("in docs/openapi.yaml but not served: %s", r)
		}
	}
}
