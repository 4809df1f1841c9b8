// SPDX-License-Identifier: MIT OR Apache-2.0
//
// The XDP programs of the llc-stack AF_XDP backend. Two programs, each with
// two entry points (section "xdp" and "xdp.frags"), share this object; the
// loader loads one of them and creates only the maps it uses.
//
// 1. llc_redirect: one endpoint owns the interface's SAP. Frames carrying our
//    IEEE 802.2 LLC SAP go to the AF_XDP socket bound to the RX queue they
//    arrived on (map `xsks`).
// 2. llc_steer: many endpoints (processes) share the interface and the SAP,
//    each with its own transport port. UI frames go to the socket of the
//    endpoint that registered their transport `dst_port`, TEST and XID to
//    the endpoint named as the interface's link responder (maps `steer_*`).
//
// Every other frame (IPv4, ARP, IPv6 ND, other SAPs) goes on to the kernel's
// stack untouched. Our frames come in two forms:
//   802.3 length form: length/type field <= 1500, LLC header at offset 14;
//   jumbo form:        EtherType 0x8870,           LLC header at offset 14.
// In both the DSAP is the byte at offset 14, the LLC control byte at 16 and,
// in UI frames, the transport header follows at 17 with its big-endian
// `dst_port` at frame offset 23 (docs/PROTOCOL.md sections 2-3).
//
// Native XDP on an interface whose MTU exceeds one page (veth at MTU 9000 or
// 65000) only accepts a frags-aware program; the loader picks the entry
// point. Only the first buffer of a multi-buffer frame is looked at, and it
// always holds the 25 bytes the decisions need.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

// The LLC SAP whose frames are redirected. A `volatile const` lands in
// .rodata: the loader writes it before the program is loaded, after which the
// verifier treats it as a constant.
volatile const __u8 llc_sap = 0x7C;

// Our MAC address: frames addressed to another individual MAC are passed
// (a bridge floods them; they are not ours). All zero: any destination.
volatile const __u8 our_mac[6] = {0, 0, 0, 0, 0, 0};

// llc_redirect: RX queue index -> AF_XDP socket. Filled by the loader.
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

// Counters (see enum counter), per CPU, shared by both programs.
enum counter {
	COUNT_REDIRECTED = 0,   // our frame, handed to bpf_redirect_map
	COUNT_NO_SOCKET = 1,    // our frame, but no socket on its queue: passed
	COUNT_PASSED = 2,       // not our frame: passed
	COUNT_NO_ENDPOINT = 3,  // llc_steer: UI frame for a port no live endpoint registered: passed
	COUNT_TO_RESPONDER = 4, // llc_steer: TEST/XID handed to the link responder's socket
	COUNT_NO_RESPONDER = 5, // llc_steer: TEST/XID, no responder or no socket on its queue: passed
	COUNT_MAX = 6,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

// ---- llc_steer's maps (layout version 1; the loader checks it) ----------
//
// An endpoint (one process) owns a slot 0..STEER_MAX_SLOTS-1 and registers
// one AF_XDP socket per RX queue it serves. An "endpoint reference" is a u32:
//   bits 0-7  slot
//   bits 8-31 generation of the slot's claim (never 0)
// and is valid while steer_slots[slot] holds the same generation. A new
// owner of a slot bumps the generation, so references left behind by a
// killed process can never reach the slot's next owner.
#define STEER_MAX_SLOTS 256
#define STEER_MAX_QUEUES 64
#define STEER_PORTS 65536

// Transport port -> endpoint reference (0: none).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STEER_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} steer_ports SEC(".maps");

// Slot -> generation of its current claim (0: never claimed).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STEER_MAX_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} steer_slots SEC(".maps");

// slot * STEER_MAX_QUEUES + RX queue index -> the slot's AF_XDP socket bound
// to that queue. The kernel removes an entry when its socket is closed.
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, STEER_MAX_SLOTS * STEER_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} steer_xsks SEC(".maps");

// Configuration words. Only STEER_CFG_RESPONDER is read here; the others
// describe the program to processes that join it.
enum steer_config {
	STEER_CFG_RESPONDER = 0, // endpoint reference of the link responder (0: none)
	STEER_CFG_MAGIC = 1,     // layout magic and version, written by the loader
	STEER_CFG_SAP = 2,
	STEER_CFG_MAC_HI = 3,    // MAC bytes 0-3, big-endian
	STEER_CFG_MAC_LO = 4,    // MAC bytes 4-5 in bits 0-15; bit 16: a MAC is set
	STEER_CFG_FLAGS = 5,     // bit 0: frags entry point; bits 1-2: 1 native, 2 generic
	STEER_CFG_MAX = 8,
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STEER_CFG_MAX);
	__type(key, __u32);
	__type(value, __u32);
} steer_config SEC(".maps");

#define ETH_HLEN 14
#define MAX_LENGTH_FIELD 1500
#define ETHERTYPE_JUMBO_LLC 0x8870
#define LLC_SSAP_OFFSET 15
#define LLC_CONTROL_OFFSET 16
#define LLC_INFO_OFFSET 17
#define PROBE_PORT_OFFSET 21
#define DST_PORT_OFFSET 23
#define LLC_UI 0x03
#define LLC_PF 0x10
#define LLC_TEST 0xE3
#define LLC_XID 0xAF

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

// The slot an endpoint reference names, or -1 if it names none (0, or a
// claim that has been superseded).
static __always_inline int slot_of(__u32 reference)
{
	__u32 generation = reference >> 8;
	__u32 slot = reference & 0xFF;
	if (!generation)
		return -1;
	__u32 *current = bpf_map_lookup_elem(&steer_slots, &slot);
	if (!current || *current != generation)
		return -1;
	return slot;
}

// Hand the frame to `slot`'s socket for the frame's RX queue, counting
// `hit`, or pass it on to the kernel, counting `miss`.
static __always_inline int to_slot(struct xdp_md *ctx, int slot, __u32 hit, __u32 miss)
{
	__u32 queue = ctx->rx_queue_index;
	if (slot < 0 || queue >= STEER_MAX_QUEUES) {
		count(miss);
		return XDP_PASS;
	}
	__u32 key = (__u32)slot * STEER_MAX_QUEUES + queue;
	int action = bpf_redirect_map(&steer_xsks, key, XDP_PASS);
	count(action == XDP_REDIRECT ? hit : miss);
	return action;
}

static __always_inline int steer(struct xdp_md *ctx)
{
	const __u8 *data = (const __u8 *)(long)ctx->data;
	const __u8 *end = (const __u8 *)(long)ctx->data_end;
	if (data + LLC_CONTROL_OFFSET + 1 > end || !is_ours(data)) {
		count(COUNT_PASSED);
		return XDP_PASS;
	}
	__u8 control = data[LLC_CONTROL_OFFSET];
	if (control == LLC_UI) {
		if (data + DST_PORT_OFFSET + 2 > end) {
			// Too short for a transport header: nobody's.
			count(COUNT_NO_ENDPOINT);
			return XDP_PASS;
		}
		__u32 port = ((__u32)data[DST_PORT_OFFSET] << 8) | data[DST_PORT_OFFSET + 1];
		__u32 *reference = bpf_map_lookup_elem(&steer_ports, &port);
		int slot = reference ? slot_of(*reference) : -1;
		if (slot < 0) {
			count(COUNT_NO_ENDPOINT);
			return XDP_PASS;
		}
		return to_slot(ctx, slot, COUNT_REDIRECTED, COUNT_NO_SOCKET);
	}
	__u8 command = control & ~LLC_PF;
	// A TEST answer to a reachability probe ("LLCR", the prober's port, a
	// nonce in the information field, which TEST answers copy) goes to
	// the endpoint that probed, as UI frames go to their port's.
	if (command == LLC_TEST && (data[LLC_SSAP_OFFSET] & 1) &&
	    data + PROBE_PORT_OFFSET + 2 <= end && data[LLC_INFO_OFFSET] == 'L' &&
	    data[LLC_INFO_OFFSET + 1] == 'L' && data[LLC_INFO_OFFSET + 2] == 'C' &&
	    data[LLC_INFO_OFFSET + 3] == 'R') {
		__u32 port = ((__u32)data[PROBE_PORT_OFFSET] << 8) | data[PROBE_PORT_OFFSET + 1];
		__u32 *reference = bpf_map_lookup_elem(&steer_ports, &port);
		int slot = reference ? slot_of(*reference) : -1;
		if (slot < 0) {
			count(COUNT_NO_ENDPOINT);
			return XDP_PASS;
		}
		return to_slot(ctx, slot, COUNT_REDIRECTED, COUNT_NO_SOCKET);
	}
	if (command == LLC_TEST || command == LLC_XID) {
		__u32 key = STEER_CFG_RESPONDER;
		__u32 *reference = bpf_map_lookup_elem(&steer_config, &key);
		int slot = reference ? slot_of(*reference) : -1;
		return to_slot(ctx, slot, COUNT_TO_RESPONDER, COUNT_NO_RESPONDER);
	}
	count(COUNT_PASSED);
	return XDP_PASS;
}

SEC("xdp")
int llc_steer(struct xdp_md *ctx)
{
	return steer(ctx);
}

SEC("xdp.frags")
int llc_steer_frags(struct xdp_md *ctx)
{
	return steer(ctx);
}

// No GPL-only helper is used, so the licence string need not be GPL-compatible.
char LICENSE[] SEC("license") = "Dual MIT/Apache-2.0";
