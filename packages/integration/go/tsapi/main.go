// Command tsapi drives Tailscale's public API (/api/v2) through Tailscale's official Go client,
// tailscale.com/client/tailscale/v2, so the integration tests can check a Headway server against
// the client that infrastructure-as-code tools are built on. Each subcommand makes one or a few
// client calls and prints one JSON value on stdout; a failed call prints
// {"error": message, "status": HTTP status} and exits 1.
//
//	tsapi --url URL (--api-key KEY | --oauth-id ID --oauth-secret SECRET [--scopes a,b]) [--tailnet T] COMMAND [ARGS]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"golang.org/x/oauth2"
	tailscale "tailscale.com/client/tailscale/v2"
)

// command is one subcommand: its argument synopsis and what it runs.
type command struct {
	usage string
	run   func(ctx context.Context, c *tailscale.Client, args []string) (any, error)
}

func main() {
	global := flag.NewFlagSet("tsapi", flag.ContinueOnError)
	base := global.String("url", "", "server URL (the API is under URL/api/v2)")
	apiKey := global.String("api-key", "", "API key, sent as the basic-auth user name as the client does")
	oauthID := global.String("oauth-id", "", "OAuth client ID (client-credentials grant at /api/v2/oauth/token)")
	oauthSecret := global.String("oauth-secret", "", "OAuth client secret")
	scopes := global.String("scopes", "", "comma-separated scopes to request with the OAuth client")
	tailnet := global.String("tailnet", "", "tailnet name (default: '-')")
	timeout := global.Duration("timeout", time.Minute, "deadline for the whole command")
	global.Usage = func() { usage(global) }
	if err := global.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	rest := global.Args()
	if len(rest) == 0 || *base == "" {
		usage(global)
		os.Exit(2)
	}
	cmd, ok := commands[rest[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "tsapi: unknown command %q\n", rest[0])
		usage(global)
		os.Exit(2)
	}
	u, err := url.Parse(*base)
	if err != nil {
		fail(fmt.Errorf("--url: %w", err))
	}
	client := &tailscale.Client{BaseURL: u, Tailnet: *tailnet, UserAgent: "headway-tsapi"}
	switch {
	case *oauthID != "":
		client.Auth = &tailscale.OAuth{ClientID: *oauthID, ClientSecret: *oauthSecret, Scopes: splitList(*scopes)}
	case *apiKey != "":
		client.APIKey = *apiKey
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	out, err := cmd.run(ctx, client, rest[1:])
	if err != nil {
		fail(err)
	}
	if out == nil {
		out = map[string]bool{"ok": true}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail(err)
	}
}

func usage(global *flag.FlagSet) {
	fmt.Fprintln(os.Stderr, "usage: tsapi --url URL (--api-key KEY | --oauth-id ID --oauth-secret SECRET [--scopes a,b]) COMMAND [ARGS]")
	global.PrintDefaults()
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	fmt.Fprintln(os.Stderr, "commands:")
	for _, name := range names {
		fmt.Fprintf(os.Stderr, "  %s %s\n", name, commands[name].usage)
	}
}

// failure is what a failed command prints: the API's message and HTTP status (0 when no response came).
type failure struct {
	Error  string `json:"error"`
	Status int    `json:"status"`
}

// describe turns a client error into a failure: an API error keeps its status, and so does a refused
// token request (the OAuth library's RetrieveError carries the token endpoint's response).
func describe(err error) failure {
	var apiErr tailscale.APIError
	if errors.As(err, &apiErr) {
		return failure{Error: apiErr.Message, Status: apiErr.Status}
	}
	var tokenErr *oauth2.RetrieveError
	if errors.As(err, &tokenErr) && tokenErr.Response != nil {
		msg := tokenErr.ErrorDescription
		if msg == "" {
			msg = strings.TrimSpace(string(tokenErr.Body))
		}
		return failure{Error: "token: " + msg, Status: tokenErr.Response.StatusCode}
	}
	return failure{Error: err.Error()}
}

func fail(err error) {
	_ = json.NewEncoder(os.Stdout).Encode(describe(err))
	os.Exit(1)
}

// splitList reads a comma-separated list; empty gives an empty (not nil) list, which the client sends as [].
func splitList(s string) []string {
	out := []string{}
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// parse reads a subcommand's flags and checks its positional argument count.
func parse(fs *flag.FlagSet, args []string, positional int) ([]string, error) {
	fs.SetOutput(os.Stderr)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() != positional {
		return nil, fmt.Errorf("%s: want %d argument(s), got %d", fs.Name(), positional, fs.NArg())
	}
	return fs.Args(), nil
}

// readFile reads a command's input file ("-" is stdin).
func readFile(path string) (string, error) {
	if path == "-" {
		b, err := os.ReadFile("/dev/stdin")
		return string(b), err
	}
	b, err := os.ReadFile(path)
	return string(b), err
}
