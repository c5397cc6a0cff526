module headway.local/tsapi

go 1.24.0

require (
	golang.org/x/oauth2 v0.34.0
	tailscale.com/client/tailscale/v2 v2.12.0
)

require github.com/tailscale/hujson v0.0.0-20220506213045-af5ed07155e5 // indirect
