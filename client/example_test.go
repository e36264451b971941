package client_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sessiond/sessiond/client"
)

// A REPL keeps its conversation in a Handle, and resumes it by alias or id.
// docs/go.md and the README's Go example show this program.
func Example() {
	addr, stop := startSessiond() // a daemon for the example
	defer stop()

	ctx := context.Background()
	c, err := client.Dial(ctx, addr) // e.g. "127.0.0.1:7437" or "unix:///run/sessiond.sock"
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	h, err := c.OpenOrCreate(ctx, client.Alias("my-project"), client.WithAutoSave(5*time.Minute))
	if err != nil {
		fmt.Println(err)
		return
	}
	// In memory; each message gets an id.
	if err := h.Append(
		client.UserText("Weather in Paris?"),
		client.ToolCall("call_1", "get_weather", `{"city":"Paris"}`, client.WithModel("gpt-4.1")),
		client.ToolResult("call_1", "14°C, light rain"),
		client.AssistantText("14°C and light rain.", client.WithModel("gpt-4.1"), client.WithUsage(52, 9)),
	); err != nil {
		fmt.Println(err)
		return
	}
	if err := h.Save(ctx); err != nil { // sends only what is new
		fmt.Println(err)
		return
	}
	if err := h.Close(ctx); err != nil { // stops auto-save, saves what is left
		fmt.Println(err)
		return
	}

	// Later, in another run: resume the same conversation.
	h, err = c.Open(ctx, client.Alias("my-project"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Close(ctx)
	for _, m := range h.Messages() {
		for _, tc := range m.GetToolCalls() {
			fmt.Printf("%s: calls %s %s\n", m.GetRole(), tc.GetName(), tc.GetArguments())
		}
		if m.GetContent() != "" {
			fmt.Printf("%s: %s\n", m.GetRole(), m.GetContent())
		}
	}
	// Output:
	// ROLE_USER: Weather in Paris?
	// ROLE_ASSISTANT: calls get_weather {"city":"Paris"}
	// ROLE_TOOL: 14°C, light rain
	// ROLE_ASSISTANT: 14°C and light rain.
}
