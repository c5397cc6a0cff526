# Drives a Headway server with Tailscale's Terraform provider through /api/v2.
#
#   headway oauthclients create --scope auth_keys,devices:core,devices:routes,policy_file,dns \
#     --tag tag:server --description terraform
#   export TAILSCALE_OAUTH_CLIENT_ID=... TAILSCALE_OAUTH_CLIENT_SECRET=...
#   terraform init && terraform apply
#
# Headway's DNS settings are changeable here with `dns.mode: database`, the
# policy with `policy.mode: database` (the defaults read both from files).

terraform {
  required_providers {
    tailscale = {
      source  = "tailscale/tailscale"
      version = "~> 0.21"
    }
  }
}

variable "headway_url" {
  type    = string
  default = "https://headway.example.com"
}

provider "tailscale" {
  base_url = var.headway_url
  tailnet  = "-"
  scopes   = ["auth_keys", "devices:core", "devices:routes", "policy_file", "dns"]
}

resource "tailscale_acl" "policy" {
  acl = jsonencode({
    tagOwners = { "tag:server" = ["autogroup:admin"] }
    acls = [
      { action = "accept", src = ["autogroup:member"], dst = ["tag:server:*"] },
    ]
  })
}

resource "tailscale_tailnet_key" "servers" {
  reusable      = true
  ephemeral     = false
  preauthorized = true
  expiry        = 86400
  description   = "servers"
  tags          = ["tag:server"]
  depends_on    = [tailscale_acl.policy]
}

resource "tailscale_dns_nameservers" "resolvers" {
  nameservers = ["9.9.9.9", "1.1.1.1"]
}

resource "tailscale_dns_search_paths" "search" {
  search_paths = ["corp.example.com"]
}

resource "tailscale_dns_preferences" "magic" {
  magic_dns = true
}

resource "tailscale_dns_split_nameservers" "corp" {
  domain      = "corp.example.com"
  nameservers = ["10.0.0.53"]
}

data "tailscale_device" "router" {
  hostname = "router"
  wait_for = "60s"
}

resource "tailscale_device_subnet_routes" "router" {
  device_id = data.tailscale_device.router.node_id
  routes    = ["10.0.0.0/24"]
}

resource "tailscale_device_tags" "router" {
  device_id = data.tailscale_device.router.node_id
  tags      = ["tag:server"]
}

resource "tailscale_device_key" "router" {
  device_id           = data.tailscale_device.router.node_id
  key_expiry_disabled = true
}

output "auth_key" {
  value     = tailscale_tailnet_key.servers.key
  sensitive = true
}
