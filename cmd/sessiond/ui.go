package main

import (
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/sessiond/sessiond/ui"
)

// The conversation viewer (package ui) is served on the --http-listen
// listener beside the API, and the listener's root leads to it.
func init() {
	mountHTTP(ui.Prefix, ui.Handler())
	mountHTTP("GET /{$}", http.RedirectHandler(ui.Prefix, http.StatusFound))
}

// viewerURL is the address a browser opens the viewer at, for the HTTP
// listener bound at addr (as listener.display spells it), or "" for a unix
// socket, which browsers cannot reach. A wildcard address is named by this
// machine's host name.
func viewerURL(addr string, tls bool) string {
	if strings.HasPrefix(addr, "unix:") {
		return ""
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if name, err := os.Hostname(); err == nil && name != "" {
			host = name
		}
	}
	scheme := "http"
	if tls {
		scheme = "https"
	}
	return (&url.URL{Scheme: scheme, Host: net.JoinHostPort(host, port), Path: ui.Prefix}).String()
}
