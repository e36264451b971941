package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// TestArgsInterspersed checks that a command's flags may come before or
// after its arguments, and that everything after "--" is an argument.
func TestArgsInterspersed(t *testing.T) {
	tests := []struct {
		args     []string
		wantPos  []string
		wantN    int64
		wantName string
	}{
		{[]string{"x", "--messages", "3"}, []string{"x"}, 3, ""},
		{[]string{"--messages", "3", "x"}, []string{"x"}, 3, ""},
		{[]string{"x", "--alias", "a", "y", "--messages=2"}, []string{"x", "y"}, 2, "a"},
		{[]string{"--", "--messages"}, []string{"--messages"}, 0, ""},
		{[]string{"x", "--", "-y"}, []string{"x", "-y"}, 0, ""},
		{[]string{"-"}, []string{"-"}, 0, ""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			cmd := forkCmd(&env{})
			if err := cmd.ParseFlags(tt.args); err != nil {
				t.Fatal(err)
			}
			n, _ := cmd.Flags().GetInt64("messages")
			name, _ := cmd.Flags().GetString("alias")
			if diff := cmp.Diff(tt.wantPos, cmd.Flags().Args()); diff != "" || n != tt.wantN || name != tt.wantName {
				t.Errorf("pos (-want +got): %s; messages %d, alias %q", diff, n, name)
			}
		})
	}
}

func TestSplitBatches(t *testing.T) {
	msg := func(n int) *sessiondv1.Message {
		return &sessiondv1.Message{Id: "x", Role: sessiondv1.Role_ROLE_USER, Content: strings.Repeat("a", n)}
	}
	tests := []struct {
		name  string
		sizes []int
		want  []int // messages per batch
	}{
		{"none", nil, nil},
		{"small ones share", []int{10, 10, 10}, []int{3}},
		{"split at the budget", []int{600, 600, 600}, []int{1, 1, 1}},
		{"two fit", []int{400, 400, 400}, []int{2, 1}},
		{"bigger than the budget travels alone", []int{10, 5000, 10}, []int{1, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var msgs []*sessiondv1.Message
			for _, s := range tt.sizes {
				msgs = append(msgs, msg(s))
			}
			var got []int
			total := 0
			for _, b := range splitBatches(msgs, 1000) {
				got = append(got, len(b))
				total += len(b)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" || total != len(msgs) {
				t.Errorf("batches (-want +got):\n%s", diff)
			}
		})
	}
}
