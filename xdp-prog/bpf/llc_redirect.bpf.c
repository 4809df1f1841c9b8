// SPDX-License-Identifier: MIT OR Apache-2.0
//
// llc_redirect: the XDP program of the llc-stack AF_XDP backend.
//
// Frames carrying our IEEE 802.2 LLC SAP go to the AF_XDP socket bound to the
// RX queue they arrived on; every other frame (IPv4, ARP, IPv6 ND, other
// SAPs) goes on to the kernel's stack untouched. Our frames come in two forms:
//   802.3 length form: length/type field <= 1500, LLC header at offset 14;
//   jumbo form:        EtherType 0x8870,           LLC header at offset 14.
// In both the DSAP is the byte at offset 14.
//
// Two entry points share the code, the socket map, the counters and the
// configuration: `llc_redirect` in section "xdp" and `llc_redirect_frags` in
// "xdp.frags". Native XDP on an interface whose MTU exceeds one page (veth at
// MTU 9000 or 65000) only accepts a frags-aware program; the loader picks one.
// Only the first buffer of a multi-buffer frame is looked at, and it always
// holds the 15 bytes the decision needs.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

// The LLC SAP whose frames are redirected. A `volatile const` lands in
// .rodata: the loader writes it before the program is loaded, after which the
// verifier treats it as a constant.
volatile const __u8 llc_sap = 0x7C;

// Our MAC address: frames addressed to another individual MAC are passed
// (a bridge floods them; they are not ours). All zero: any destination.
volatile const __u8 our_mac[6] = {0, 0, 0, 0, 0, 0};

// RX queue index -> AF_XDP socket. Filled by the loader.
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

// Counters (see enum counter), per CPU.
enum counter {
	COUNT_REDIRECTED = 0, // our frame, handed to bpf_redirect_map
	COUNT_NO_SOCKET = 1,  // our frame, but no socket on its queue: passed
	COUNT_PASSED = 2,     // not our frame: passed
	COUNT_MAX = 3,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

#define ETH_HLEN 14
#define MAX_LENGTH_FIELD 1500
#define ETHERTYPE_JUMBO_LLC 0x8870

static __always_inline void count(__u32 which)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &which);
	if (c)
		*c += 1;
}

static __always_inline int is_ours(const __u8 *p)
{
	__u16 length_type = ((__u16)p[12] << 8) | p[13];
	if (length_type > MAX_LENGTH_FIELD && length_type != ETHERTYPE_JUMBO_LLC)
		return 0;
	if (p[ETH_HLEN] != llc_sap)
		return 0;
	// Group addresses (broadcast, multicast) are for everyone.
	if (p[0] & 1)
		return 1;
	__u8 any = our_mac[0] | our_mac[1] | our_mac[2] | our_mac[3] | our_mac[4] | our_mac[5];
	if (!any)
		return 1;
	return p[0] == our_mac[0] && p[1] == our_mac[1] && p[2] == our_mac[2] &&
	       p[3] == our_mac[3] && p[4] == our_mac[4] && p[5] == our_mac[5];
}

static __always_inline int decide(struct xdp_md *ctx)
{
	const __u8 *data = (const __u8 *)(long)ctx->data;
	const __u8 *end = (const __u8 *)(long)ctx->data_end;
	if (data + ETH_HLEN + 1 > end || !is_ours(data)) {
		count(COUNT_PASSED);
		return XDP_PASS;
	}
	// XDP_PASS as the flags' low bits: the action taken when the queue has
	// no socket in the map.
	int action = bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
	count(action == XDP_REDIRECT ? COUNT_REDIRECTED : COUNT_NO_SOCKET);
	return action;
}

SEC("xdp")
int llc_redirect(struct xdp_md *ctx)
{
	return decide(ctx);
}

SEC("xdp.frags")
int llc_redirect_frags(struct xdp_md *ctx)
{
	return decide(ctx);
}

// No GPL-only helper is used, so the licence string need not be GPL-compatible.
char LICENSE[] SEC("license") = "Dual MIT/Apache-2.0";
