package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	tailscale "tailscale.com/client/tailscale/v2"
)

// commands maps each subcommand name to what it calls on the client.
var commands = map[string]command{
	"keys-create":         {"[--tags t1,t2] [--reusable] [--ephemeral] [--preauthorized] [--expiry SECONDS] [--description D]", keysCreate},
	"keys-list":           {"[--all]", keysList},
	"oauth-client-create": {"--scopes a,b [--tags t1,t2] [--description D]", oauthClientCreate},
	"oauth-client-set":    {"--scopes a,b [--tags t1,t2] [--description D] ID", oauthClientSet},
	"key-get":             {"ID", oneID(func(ctx context.Context, c *tailscale.Client, id string) (any, error) { return c.Keys().Get(ctx, id) })},
	"key-delete": {"ID", oneID(func(ctx context.Context, c *tailscale.Client, id string) (any, error) {
		return nil, c.Keys().Delete(ctx, id)
	})},

	"devices-list": {"[--all]", devicesList},
	"device-get":   {"[--all] ID", deviceGet},
	"device-name": {"ID NAME", twoArgs(func(ctx context.Context, c *tailscale.Client, id, name string) error {
		return c.Devices().SetName(ctx, id, name)
	})},
	"device-tags": {"ID TAG,TAG", twoArgs(func(ctx context.Context, c *tailscale.Client, id, tags string) error {
		return c.Devices().SetTags(ctx, id, splitList(tags))
	})},
	"device-ip": {"ID IPV4", twoArgs(func(ctx context.Context, c *tailscale.Client, id, ip string) error {
		return c.Devices().SetIPv4Address(ctx, id, ip)
	})},
	"device-key":       {"[--expiry-disabled] ID", deviceKey},
	"device-authorize": {"[--authorized=false] ID", deviceAuthorize},
	"device-delete": {"ID", oneID(func(ctx context.Context, c *tailscale.Client, id string) (any, error) {
		return nil, c.Devices().Delete(ctx, id)
	})},
	"routes-get": {"ID", oneID(func(ctx context.Context, c *tailscale.Client, id string) (any, error) {
		return c.Devices().SubnetRoutes(ctx, id)
	})},
	"routes-set": {"ID [CIDR...]", routesSet},

	"acl-get":      {"[--json]", aclGet},
	"acl-set":      {"[--if-match ETAG] FILE", aclSet},
	"acl-validate": {"FILE", aclValidate},

	"dns-nameservers-get": {"", noArgs(func(ctx context.Context, c *tailscale.Client) (any, error) {
		return wrap("dns", c.DNS().Nameservers)(ctx)
	})},
	"dns-nameservers-set": {"[ADDR...]", listSetter(func(ctx context.Context, c *tailscale.Client, l []string) error {
		return c.DNS().SetNameservers(ctx, l)
	})},
	"dns-searchpaths-get": {"", noArgs(func(ctx context.Context, c *tailscale.Client) (any, error) {
		return wrap("searchPaths", c.DNS().SearchPaths)(ctx)
	})},
	"dns-searchpaths-set": {"[DOMAIN...]", listSetter(func(ctx context.Context, c *tailscale.Client, l []string) error {
		return c.DNS().SetSearchPaths(ctx, l)
	})},
	"dns-preferences-get":  {"", noArgs(func(ctx context.Context, c *tailscale.Client) (any, error) { return c.DNS().Preferences(ctx) })},
	"dns-preferences-set":  {"--magic-dns=BOOL", dnsPreferencesSet},
	"dns-split-get":        {"", noArgs(func(ctx context.Context, c *tailscale.Client) (any, error) { return c.DNS().SplitDNS(ctx) })},
	"dns-split-set":        {"[DOMAIN=NS,NS...]", dnsSplitSet},
	"users-list":           {"", noArgs(func(ctx context.Context, c *tailscale.Client) (any, error) { return wrap("users", usersList(c))(ctx) })},
	"user-get":             {"ID", oneID(func(ctx context.Context, c *tailscale.Client, id string) (any, error) { return c.Users().Get(ctx, id) })},
	"tailnet-settings-get": {"", noArgs(func(ctx context.Context, c *tailscale.Client) (any, error) { return c.TailnetSettings().Get(ctx) })},
}

func noArgs(fn func(context.Context, *tailscale.Client) (any, error)) func(context.Context, *tailscale.Client, []string) (any, error) {
	return func(ctx context.Context, c *tailscale.Client, args []string) (any, error) {
		if len(args) != 0 {
			return nil, fmt.Errorf("takes no arguments, got %q", args)
		}
		return fn(ctx, c)
	}
}

func oneID(fn func(context.Context, *tailscale.Client, string) (any, error)) func(context.Context, *tailscale.Client, []string) (any, error) {
	return func(ctx context.Context, c *tailscale.Client, args []string) (any, error) {
		if len(args) != 1 {
			return nil, fmt.Errorf("want one argument (an ID), got %q", args)
		}
		return fn(ctx, c, args[0])
	}
}

func twoArgs(fn func(context.Context, *tailscale.Client, string, string) error) func(context.Context, *tailscale.Client, []string) (any, error) {
	return func(ctx context.Context, c *tailscale.Client, args []string) (any, error) {
		if len(args) != 2 {
			return nil, fmt.Errorf("want two arguments, got %q", args)
		}
		return nil, fn(ctx, c, args[0], args[1])
	}
}

func listSetter(fn func(context.Context, *tailscale.Client, []string) error) func(context.Context, *tailscale.Client, []string) (any, error) {
	return func(ctx context.Context, c *tailscale.Client, args []string) (any, error) {
		return nil, fn(ctx, c, append([]string{}, args...))
	}
}

// wrap prints a list the client returns bare under the key the API sends it in.
func wrap[T any](key string, get func(context.Context) (T, error)) func(context.Context) (any, error) {
	return func(ctx context.Context) (any, error) {
		v, err := get(ctx)
		if err != nil {
			return nil, err
		}
		return map[string]T{key: v}, nil
	}
}

func usersList(c *tailscale.Client) func(context.Context) ([]tailscale.User, error) {
	return func(ctx context.Context) ([]tailscale.User, error) { return c.Users().List(ctx, nil, nil) }
}

func keysCreate(ctx context.Context, c *tailscale.Client, args []string) (any, error) {
	fs := flag.NewFlagSet("keys-create", flag.ContinueOnError)
	tags := fs.String("tags", "", "comma-separated tags for the devices the key creates")
	reusable := fs.Bool("reusable", false, "the key may be used more than once")
	ephemeral := fs.Bool("ephemeral", false, "devices joined with it are ephemeral")
	preauthorized := fs.Bool("preauthorized", false, "devices joined with it need no approval")
	expiry := fs.Int64("expiry", 0, "seconds until the key expires (0: the server's default)")
	description := fs.String("description", "", "description")
	if _, err := parse(fs, args, 0); err != nil {
		return nil, err
	}
	var req tailscale.CreateKeyRequest
	req.Capabilities.Devices.Create.Reusable = *reusable
	req.Capabilities.Devices.Create.Ephemeral = *ephemeral
	req.Capabilities.Devices.Create.Preauthorized = *preauthorized
	req.Capabilities.Devices.Create.Tags = splitList(*tags)
	req.ExpirySeconds = *expiry
	req.Description = *description
	return c.Keys().CreateAuthKey(ctx, req)
}

func oauthClientCreate(ctx context.Context, c *tailscale.Client, args []string) (any, error) {
	fs := flag.NewFlagSet("oauth-client-create", flag.ContinueOnError)
	scopes := fs.String("scopes", "", "comma-separated scopes the client's tokens may carry")
	tags := fs.String("tags", "", "comma-separated tags the client may assign")
	description := fs.String("description", "", "description")
	if _, err := parse(fs, args, 0); err != nil {
		return nil, err
	}
	return c.Keys().CreateOAuthClient(ctx, tailscale.CreateOAuthClientRequest{Scopes: splitList(*scopes), Tags: splitList(*tags), Description: *description})
}

func oauthClientSet(ctx context.Context, c *tailscale.Client, args []string) (any, error) {
	fs := flag.NewFlagSet("oauth-client-set", flag.ContinueOnError)
	scopes := fs.String("scopes", "", "comma-separated scopes, all of them")
	tags := fs.String("tags", "", "comma-separated tags, all of them")
	description := fs.String("description", "", "description")
	rest, err := parse(fs, args, 1)
	if err != nil {
		return nil, err
	}
	return c.Keys().SetOAuthClient(ctx, rest[0], tailscale.SetOAuthClientRequest{Scopes: splitList(*scopes), Tags: splitList(*tags), Description: *description})
}

func keysList(ctx context.Context, c *tailscale.Client, args []string) (any, error) {
	fs := flag.NewFlagSet("keys-list", flag.ContinueOnError)
	all := fs.Bool("all", false, "list tailnet-level keys too")
	if _, err := parse(fs, args, 0); err != nil {
		return nil, err
	}
	keys, err := c.Keys().List(ctx, *all)
	return map[string]any{"keys": keys}, err
}

func devicesList(ctx context.Context, c *tailscale.Client, args []string) (any, error) {
	fs := flag.NewFlagSet("devices-list", flag.ContinueOnError)
	all := fs.Bool("all", false, "fields=all")
	if _, err := parse(fs, args, 0); err != nil {
		return nil, err
	}
	fields := tailscale.IncludeFieldsDefault
	if *all {
		fields = tailscale.IncludeFieldsAll
	}
	devices, err := c.Devices().List(ctx, tailscale.WithFields(fields))
	return map[string]any{"devices": devices}, err
}

// idAndBool is a command taking one ID and one boolean flag.
func idAndBool(name, flagName string, def bool, fn func(context.Context, *tailscale.Client, string, bool) (any, error)) func(context.Context, *tailscale.Client, []string) (any, error) {
	return func(ctx context.Context, c *tailscale.Client, args []string) (any, error) {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		value := fs.Bool(flagName, def, flagName)
		pos, err := parse(fs, args, 1)
		if err != nil {
			return nil, err
		}
		return fn(ctx, c, pos[0], *value)
	}
}

var deviceGet = idAndBool("device-get", "all", false, func(ctx context.Context, c *tailscale.Client, id string, all bool) (any, error) {
	if all {
		return c.Devices().GetWithAllFields(ctx, id)
	}
	return c.Devices().Get(ctx, id)
})

var deviceKey = idAndBool("device-key", "expiry-disabled", false, func(ctx context.Context, c *tailscale.Client, id string, disabled bool) (any, error) {
	return nil, c.Devices().SetKey(ctx, id, tailscale.DeviceKey{KeyExpiryDisabled: disabled})
})

var deviceAuthorize = idAndBool("device-authorize", "authorized", true, func(ctx context.Context, c *tailscale.Client, id string, authorized bool) (any, error) {
	return nil, c.Devices().SetAuthorized(ctx, id, authorized)
})

func routesSet(ctx context.Context, c *tailscale.Client, args []string) (any, error) {
	if len(args) < 1 {
		return nil, errors.New("routes-set: want a device ID and the routes to enable")
	}
	if err := c.Devices().SetSubnetRoutes(ctx, args[0], append([]string{}, args[1:]...)); err != nil {
		return nil, err
	}
	return c.Devices().SubnetRoutes(ctx, args[0])
}

// aclGet prints the policy file as the server stores it (HuJSON) or, with --json, as the client parses it,
// with the ETag either way.
func aclGet(ctx context.Context, c *tailscale.Client, args []string) (any, error) {
	fs := flag.NewFlagSet("acl-get", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "parse into the client's ACL struct")
	if _, err := parse(fs, args, 0); err != nil {
		return nil, err
	}
	if *asJSON {
		acl, err := c.PolicyFile().Get(ctx)
		if err != nil {
			return nil, err
		}
		return map[string]any{"acl": acl, "etag": acl.ETag}, nil
	}
	raw, err := c.PolicyFile().Raw(ctx)
	if err != nil {
		return nil, err
	}
	return map[string]string{"hujson": raw.HuJSON, "etag": raw.ETag}, nil
}

func aclSet(ctx context.Context, c *tailscale.Client, args []string) (any, error) {
	fs := flag.NewFlagSet("acl-set", flag.ContinueOnError)
	ifMatch := fs.String("if-match", "", "ETag the stored policy must still have")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return nil, err
	}
	text, err := readFile(pos[0])
	if err != nil {
		return nil, err
	}
	return nil, c.PolicyFile().Set(ctx, text, *ifMatch)
}

// aclValidate prints {"valid": true}, or {"valid": false, ...} with the server's verdict: a policy that does
// not parse is refused with 400, a failing tests block answers 200 with a message. Any other failure
// (authentication, permission, a missing route) stays an error.
func aclValidate(ctx context.Context, c *tailscale.Client, args []string) (any, error) {
	if len(args) != 1 {
		return nil, errors.New("acl-validate: want one FILE")
	}
	text, err := readFile(args[0])
	if err != nil {
		return nil, err
	}
	err = c.PolicyFile().Validate(ctx, text)
	if err == nil {
		return map[string]bool{"valid": true}, nil
	}
	var apiErr tailscale.APIError
	if errors.As(err, &apiErr) && apiErr.Status == 400 {
		return map[string]any{"valid": false, "status": apiErr.Status, "message": apiErr.Message, "data": apiErr.Data}, nil
	}
	if strings.HasPrefix(err.Error(), "ACL validation failed") {
		return map[string]any{"valid": false, "status": 200, "message": err.Error()}, nil
	}
	return nil, err
}

func dnsPreferencesSet(ctx context.Context, c *tailscale.Client, args []string) (any, error) {
	fs := flag.NewFlagSet("dns-preferences-set", flag.ContinueOnError)
	magic := fs.Bool("magic-dns", false, "MagicDNS on or off")
	if _, err := parse(fs, args, 0); err != nil {
		return nil, err
	}
	if err := c.DNS().SetPreferences(ctx, tailscale.DNSPreferences{MagicDNS: *magic}); err != nil {
		return nil, err
	}
	return c.DNS().Preferences(ctx)
}

func dnsSplitSet(ctx context.Context, c *tailscale.Client, args []string) (any, error) {
	req := tailscale.SplitDNSRequest{}
	for _, arg := range args {
		domain, servers, ok := strings.Cut(arg, "=")
		if !ok {
			return nil, fmt.Errorf("dns-split-set: %q is not DOMAIN=NS,NS", arg)
		}
		req[domain] = splitList(servers)
	}
	if err := c.DNS().SetSplitDNS(ctx, req); err != nil {
		return nil, err
	}
	return c.DNS().SplitDNS(ctx)
}
