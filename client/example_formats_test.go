package client_test

import (
	"context"
	"fmt"
	"net"
	"os"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/client/clienttest"
	"github.com/sessiond/sessiond/convert"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// A loaded session goes to a model in one line: Export writes it as the
// request body the model's API takes.
func ExampleHandle_Export() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "sessiond-example")
	defer os.RemoveAll(dir)
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	srv, err := clienttest.Start(dir, clienttest.WithListener(lis))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Stop()
	c, err := client.Dial(ctx, srv.Addr())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	h, err := c.OpenOrCreate(ctx, client.Alias("weather"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Close(ctx)
	_ = h.Append(
		&sessiondv1.Message{Role: sessiondv1.Role_ROLE_USER, Content: "Weather in Paris?"},
		&sessiondv1.Message{Role: sessiondv1.Role_ROLE_ASSISTANT, Model: "claude-sonnet-4-5", ToolCalls: []*sessiondv1.ToolCall{
			{Id: "toolu_01", Name: "get_weather", Arguments: `{"location":"Paris"}`}}},
		&sessiondv1.Message{Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: "toolu_01", Content: "14°C, light rain"},
	)

	body, warnings, err := h.Export(convert.Anthropic, convert.ExportOptions{MaxTokens: 1024})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(string(body)) // what http.Post to https://api.anthropic.com/v1/messages takes
	for _, w := range warnings {
		fmt.Println("warning:", w)
	}
	// Output:
	// {
	//   "model": "claude-sonnet-4-5",
	//   "messages": [
	//     {
	//       "role": "user",
	//       "content": "Weather in Paris?"
	//     },
	//     {
	//       "role": "assistant",
	//       "content": [
	//         {
	//           "type": "tool_use",
	//           "id": "toolu_01",
	//           "name": "get_weather",
	//           "input": {
	//             "location": "Paris"
	//           }
	//         }
	//       ]
	//     },
	//     {
	//       "role": "user",
	//       "content": [
	//         {
	//           "type": "tool_result",
	//           "tool_use_id": "toolu_01",
	//           "content": "14°C, light rain"
	//         }
	//       ]
	//     }
	//   ],
	//   "max_tokens": 1024
	// }
	// warning: message.model: not held by anthropic; dropped (message 1)
}
