// SPDX-License-Identifier: MIT OR Apache-2.0
//
// link_chaos: a tc (cls_bpf, direct action) program that damages frames on a
// link, independently of the stack under test: the kernel here has no netem.
// Attached to the egress hook of a bridge port (or any interface), it drops,
// duplicates (bpf_clone_redirect of the frame to the same egress) or corrupts
// (flips one bit after the Ethernet header) each frame with the probabilities
// held in the `config` map, which user space may rewrite at any time.
//
// Which frames: with config.sap < 256 only 802.2 LLC frames (802.3 length
// form or jumbo EtherType 0x8870) whose DSAP equals config.sap; with 256 or
// more, every frame.
//
// Randomness: SplitMix64 per CPU, seeded from config.seed (and the CPU
// number); a new seed written to the map reseeds every CPU on its next frame.

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

struct chaos_config {
	__u64 drop;      // probability * 2^32
	__u64 duplicate; // probability * 2^32
	__u64 corrupt;   // probability * 2^32
	__u64 seed;
	__u32 sap;       // 0..255: only LLC frames for this DSAP; >= 256: all frames
	__u32 reserved;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct chaos_config);
} config SEC(".maps");

enum counter {
	COUNT_SEEN = 0,       // frames the hook saw (clones excluded)
	COUNT_MATCHED = 1,    // frames the configuration selects
	COUNT_DROPPED = 2,
	COUNT_DUPLICATED = 3,
	COUNT_CORRUPTED = 4,
	COUNT_MAX = 5,
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, COUNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

struct rng_state {
	__u64 state;
	__u64 seed; // the config.seed this state was derived from
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rng_state);
} rng SEC(".maps");

// Marks the duplicate while it passes this hook a second time.
#define CLONE_MARK 0x11c0c4a0u
#define ETH_HLEN 14
#define MAX_LENGTH_FIELD 1500
#define ETHERTYPE_JUMBO_LLC 0x8870

static __always_inline void count(__u32 which)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &which);

	if (c)
		__sync_fetch_and_add(c, 1);
}

static __always_inline __u32 next_random(struct rng_state *r)
{
	__u64 z;

	r->state += 0x9E3779B97F4A7C15ull;
	z = r->state;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return (__u32)((z ^ (z >> 31)) >> 32);
}

static __always_inline int matches(struct __sk_buff *skb, __u32 sap)
{
	__u8 hdr[3]; // length/type (2), DSAP (1)

	if (sap >= 256)
		return 1;
	if (bpf_skb_load_bytes(skb, 12, hdr, sizeof(hdr)) < 0)
		return 0;
	__u16 type = ((__u16)hdr[0] << 8) | hdr[1];
	if (type > MAX_LENGTH_FIELD && type != ETHERTYPE_JUMBO_LLC)
		return 0;
	return hdr[2] == sap;
}

SEC("tc")
int link_chaos(struct __sk_buff *skb)
{
	__u32 zero = 0;

	if (skb->mark == CLONE_MARK) {
		// Our own duplicate coming through again: let it go as it is.
		skb->mark = 0;
		return TC_ACT_OK;
	}
	count(COUNT_SEEN);
	struct chaos_config *cfg = bpf_map_lookup_elem(&config, &zero);
	struct rng_state *r = bpf_map_lookup_elem(&rng, &zero);
	if (!cfg || !r)
		return TC_ACT_OK;
	if (!matches(skb, cfg->sap))
		return TC_ACT_OK;
	count(COUNT_MATCHED);
	if (r->seed != cfg->seed || r->state == 0) {
		r->seed = cfg->seed;
		r->state = cfg->seed ^ ((__u64)(bpf_get_smp_processor_id() + 1) * 0xD1B54A32D192ED03ull);
	}
	if ((__u64)next_random(r) < cfg->drop) {
		count(COUNT_DROPPED);
		return TC_ACT_SHOT;
	}
	if ((__u64)next_random(r) < cfg->corrupt && skb->len > ETH_HLEN) {
		__u32 span = skb->len - ETH_HLEN;
		__u32 at = ETH_HLEN + next_random(r) % span;
		__u8 byte;

		if (bpf_skb_load_bytes(skb, at, &byte, 1) == 0) {
			byte ^= (__u8)(1u << (next_random(r) & 7));
			if (bpf_skb_store_bytes(skb, at, &byte, 1, 0) == 0)
				count(COUNT_CORRUPTED);
		}
	}
	if ((__u64)next_random(r) < cfg->duplicate) {
		__u32 mark = skb->mark;

		skb->mark = CLONE_MARK;
		if (bpf_clone_redirect(skb, skb->ifindex, 0) == 0)
			count(COUNT_DUPLICATED);
		skb->mark = mark;
	}
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
