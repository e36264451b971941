package client_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/client/clienttest"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// A REPL keeps its conversation in a Handle, and resumes it by alias or id.
func Example() {
	ctx := context.Background()

	// An in-process sessiond on a loopback port, standing in for the daemon.
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

	h, err := c.OpenOrCreate(ctx, client.Alias("my-project"), client.WithAutoSave(5*time.Minute))
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = h.Append(
		&sessiondv1.Message{Role: sessiondv1.Role_ROLE_USER, Content: "What is 2+2?"},
		&sessiondv1.Message{Role: sessiondv1.Role_ROLE_ASSISTANT, Content: "4"},
	)
	if err := h.Close(ctx); err != nil { // saves what is left
		fmt.Println(err)
		return
	}

	// Later: resume the same conversation.
	h, err = c.Open(ctx, client.Alias("my-project"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Close(ctx)
	for _, m := range h.Messages() {
		fmt.Printf("%s: %s\n", m.GetRole(), m.GetContent())
	}
	// Output:
	// ROLE_USER: What is 2+2?
	// ROLE_ASSISTANT: 4
}
