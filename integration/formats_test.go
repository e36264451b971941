package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sessiond/sessiond/client/convert"
)

// TestFormatsAgainstSDKTypes type-checks what convert exports, from every
// fixture, as OpenAI Chat, OpenAI Responses and Anthropic request bodies
// against the types of the vendors' own Node.js SDKs (openai, which the
// Node client's dev dependencies bring, and @anthropic-ai/sdk, a dev
// dependency for this test): a field the API does not take, or one it
// requires and the export left out, fails tsc.
func TestFormatsAgainstSDKTypes(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	buildNodeClient(t, ctx) // installs @anthropic-ai/sdk too when it is missing
	nodeDir := filepath.Join(moduleRoot, "clients", "node")

	types := map[convert.Format]string{
		convert.OpenAIChat:      "ChatCompletionCreateParamsNonStreaming",
		convert.OpenAIResponses: "ResponseCreateParamsNonStreaming",
		convert.Anthropic:       "MessageCreateParamsNonStreaming",
	}
	var src strings.Builder
	src.WriteString(`import type { ChatCompletionCreateParamsNonStreaming } from "openai/resources/chat/completions";
import type { ResponseCreateParamsNonStreaming } from "openai/resources/responses/responses";
import type { MessageCreateParamsNonStreaming } from "@anthropic-ai/sdk/resources/messages";
`)
	n := 0
	for _, from := range []convert.Format{convert.OpenAIChat, convert.OpenAIResponses, convert.Anthropic} {
		data, err := os.ReadFile(filepath.Join(moduleRoot, "client", "convert", "testdata", string(from)+".json"))
		if err != nil {
			t.Fatal(err)
		}
		s, _, err := convert.Import(from, data)
		if err != nil {
			t.Fatal(err)
		}
		for _, to := range []convert.Format{convert.OpenAIChat, convert.OpenAIResponses, convert.Anthropic} {
			// max_tokens: Anthropic requires one, which only its own
			// fixture carries.
			body, _, err := convert.Export(to, s, convert.ExportOptions{Model: "a-model", MaxTokens: 1024})
			if err != nil {
				t.Fatal(err)
			}
			n++
			fmt.Fprintf(&src, "\n// %s imported, exported as %s\nexport const body%d: %s = %s;\n", from, to, n, types[to], body)
		}
	}
	// tsc finds the openai package from a folder under clients/node.
	dir, err := os.MkdirTemp(nodeDir, ".formats-check-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "bodies.ts")
	if err := os.WriteFile(file, []byte(src.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(nodeDir, "node_modules", ".bin", "tsc"), "--ignoreConfig", "--noEmit", "--strict",
		"--target", "es2022", "--module", "nodenext", "--moduleResolution", "nodenext", "--skipLibCheck", file)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tsc: %v\n%s\n(the checked file:)\n%s", err, out, src.String())
	}
}
