package client_test

import (
	"context"
	"fmt"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/client/convert"
)

// A loaded session goes to a model in one line: Export writes it as the
// request body the model's API takes.
func ExampleHandle_Export() {
	addr, stop := startSessiond() // a daemon for the example
	defer stop()

	ctx := context.Background()
	c, err := client.Dial(ctx, addr)
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
		client.UserText("Weather in Paris?"),
		client.ToolCall("toolu_01", "get_weather", `{"location":"Paris"}`, client.WithModel("claude-sonnet-4-5")),
		client.ToolResult("toolu_01", "14°C, light rain"),
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
