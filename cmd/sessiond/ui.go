package main

import "github.com/sessiond/sessiond/ui"

// The conversation viewer (package ui) is served on the --http-listen
// listener beside the API.
func init() { mountHTTP(ui.Prefix, ui.Handler()) }
