package destconfig

import (
	"os"
	"strings"
	"testing"
)

// fencedBlocks returns the fenced code blocks of a Markdown file, each
// with its info string ("yaml", "sh" or "").
func fencedBlocks(t *testing.T, path string) (infos, blocks []string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cur []string
	in := false
	for line := range strings.SplitSeq(string(data), "\n") {
		switch {
		case !in && strings.HasPrefix(line, "```"):
			in, cur = true, nil
			infos = append(infos, strings.TrimPrefix(line, "```"))
		case in && line == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, "\n")+"\n")
		case in:
			cur = append(cur, line)
		}
	}
	return infos, blocks
}

// TestDocumentedExamplesAreWhatTheCodeDoes: the files of
// docs/DESTINATIONS.md are read as it says, and its error and plan
// outputs are the package's own.
func TestDocumentedExamplesAreWhatTheCodeDoes(t *testing.T) {
	t.Setenv("GW_SECRET", gatewaySecret)
	infos, blocks := fencedBlocks(t, "../../docs/DESTINATIONS.md")
	var yamls, outputs []string
	for i, b := range blocks {
		switch infos[i] {
		case "yaml":
			yamls = append(yamls, b)
		case "":
			outputs = append(outputs, b)
		}
	}
	if len(yamls) != 2 || len(outputs) != 3 {
		t.Fatalf("docs/DESTINATIONS.md has %d yaml and %d output blocks, want 2 and 3: update this test with the page", len(yamls), len(outputs))
	}
	if yamls[0] != issueExample {
		t.Errorf("the first example of the page is not the issue's:\n%s", yamls[0])
	}
	cfg, err := Parse("payments.yaml", []byte(yamls[0]))
	if err != nil {
		t.Fatalf("the page's first example: %v", err)
	}
	if _, err := Parse("payments.yaml", []byte(yamls[1])); err == nil || err.Error()+"\n" != outputs[0] {
		t.Errorf("the page's example of three mistakes gives\n%v\nthe page says\n%s", err, outputs[0])
	}
	approval, merchant := TypePair{"ApprovalRequested", "payment"}, TypePair{"MerchantUpdated", "merchant"}
	captured, refund := TypePair{"PaymentCaptured", "payment"}, TypePair{"RefundIssued", "refund"}
	if err := cfg.CheckTypes([]TypePair{approval, merchant, captured, refund}); err == nil || err.Error()+"\n" != outputs[1] {
		t.Errorf("CheckTypes gives\n%v\nthe page says\n%s", err, outputs[1])
	}
	if got := cfg.Describe([]TypePair{approval, merchant, captured}); got != outputs[2] {
		t.Errorf("Describe gives\n%s\nthe page says\n%s", got, outputs[2])
	}
}
