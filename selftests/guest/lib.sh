# SPDX-License-Identifier: GPL-2.0
# Helpers for the guest scripts.

# A veth pair for the rodp devices: veth0 <-> veth1, up, with IPv4 addresses.
make_netdevs() {
	ip link add veth0 type veth peer name veth1 2>/dev/null || true
	ip addr add 10.0.0.1/24 dev veth0 2>/dev/null || true
	ip addr add 10.0.0.2/24 dev veth1 2>/dev/null || true
	ip link set veth0 up
	ip link set veth1 up
}
