/*
 * btl/llc: an Open MPI 4.1 BTL (interface 3.1.0) over the project's LLC
 * stack, through the Rust shim (libmpi_btl_shim.so, include/llc_shim.h).
 *
 * One module per process, on one interface. By default every local rank
 * shares the host's interfaces that can carry LLC (up, Ethernet, not
 * loopback), round-robin by local rank, each rank with its own port on the
 * interface; btl_llc_if_include / btl_llc_if_exclude narrow the list as
 * btl_tcp's do, and btl_llc_if (a comma list indexed by local rank, or a
 * pattern with %d replaced by the local rank) names each rank's interface
 * outright. Peers on the same host are reached through the stack's
 * same-host path (ob1 prefers btl/vader for them when it is loaded). BTL
 * tags are the shim's
 * active-message ids; descriptors carry shim-owned send buffers, handed to
 * the transport without a copy; put/get go to the message layer's RMA.
 * Large fragments of contiguous data are not packed at all: the descriptor
 * points into the application's buffer, which the shim lends to the
 * transport until the peer has acknowledged it (btl_llc_lend_min).
 *
 * Frames are authenticated with a per-job key unless btl_llc_auth is 0:
 * LLC_AUTH_KEY's when the job's environment sets it; otherwise the job's
 * rank 0 draws 32 random bytes at init and publishes them in the modex
 * (AUTH_MODEX_KEY, beside its address), and every other rank opens its
 * endpoint waiting for the key (it takes no frame until then) and sets
 * rank 0's at its first add_procs, after the modex exchange and before it
 * connects to anyone. docs/SECURITY.md, "Jobs are keyed by default".
 *
 * Threads: receive, RMA-completion and failure callbacks run from
 * mca_btl_llc_component_progress (Open MPI's progress loop) only. The
 * shim's background thread keeps connections alive while the application
 * computes and never calls into Open MPI.
 *
 * Written for this project from the BTL interface in opal/mca/btl/btl.h.
 */

#include "opal_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opal/class/opal_bitmap.h"
#include "opal/datatype/opal_convertor.h"
#include "opal/mca/btl/base/base.h"
#include "opal/mca/btl/btl.h"
#include "opal/mca/pmix/pmix.h"
#include "opal/util/output.h"
#include "opal/util/proc.h"

#include "llc_shim.h"

/* Whether btl_llc_put is on unless set: on since it saved the receiver's
 * second copy where both ends send at once (docs/BENCHMARKS.md, "Puts
 * where both ends send"); neutral one way ("Puts placed by the
 * transport"). */
#define PUT_DEFAULT true

/* ----- types ----- */

struct mca_btl_base_endpoint_t {
    opal_proc_t *proc;
    uint32_t peer;
    int failed;  /* the peer failed: sends are refused */
    int closed;  /* the peer closed in order (it finished) */
};
typedef struct mca_btl_base_endpoint_t mca_btl_llc_endpoint_t;

/* What peers need to reach registered memory: the shim's key and the
 * registered base address (remote addresses are absolute). */
struct mca_btl_base_registration_handle_t {
    uint64_t key;
    uint64_t base;
};

typedef struct llc_frag {
    mca_btl_base_descriptor_t base;
    /* [0]: the whole message in `buf`, or only ob1's header when lent;
     * [1]: when lent, the application's data. */
    mca_btl_base_segment_t segments[2];
    LlcShimBuf *buf; /* NULL once sent (unless lent: then the header) */
    int lent;        /* segments[1] points into the application's buffer */
    mca_btl_llc_endpoint_t *endpoint; /* of a lent send, for its completion */
    struct llc_frag *next;
} llc_frag_t;

typedef struct llc_rma {
    mca_btl_base_rdma_completion_fn_t cbfunc;
    mca_btl_llc_endpoint_t *endpoint;
    void *local_address;
    mca_btl_base_registration_handle_t *local_handle;
    void *cbcontext;
    void *cbdata;
} llc_rma_t;

/* ----- state ----- */

static struct {
    char *if_spec;
    char *if_include;
    char *if_exclude;
    char *backend;
    int sap;
    int port;
    bool progress_thread;
    bool exclusive;
    int progress_interval_us;
    int coalesce_us;
    int idle_timeout_ms;
    bool rdma;
    bool put;
    int lend_min;
    int print_stats;
    int verbose;
    bool auth;
} params;

static LlcShim *shim;
static int output = -1;
static int finalizing;
static int local_rank;
static char ifname[64];
static char transport_name[128];
static mca_btl_base_module_error_cb_fn_t error_cb;
static llc_frag_t *free_frags;
static mca_btl_llc_endpoint_t **peers; /* by shim peer number */
static size_t npeers_cap;
/* The endpoint waits for rank 0's key (LLC_SHIM_AUTH_LATER, not rank 0). */
static int key_pending;

/* The modex key under which rank 0 publishes the job's key material. */
#define AUTH_MODEX_KEY "btl.llc.auth_key"

static int llc_register(void);
static int llc_open(void);
static int llc_close(void);
static mca_btl_base_module_t **llc_init(int *num_btls, bool progress_threads, bool mpi_threads);
static int llc_progress(void);

/* The component; its symbol name is what the MCA loader looks up. */
OPAL_MODULE_DECLSPEC extern mca_btl_base_component_3_0_0_t mca_btl_llc_component;
mca_btl_base_component_3_0_0_t mca_btl_llc_component = {
    .btl_version = {
        MCA_BTL_DEFAULT_VERSION("llc"),
        .mca_open_component = llc_open,
        .mca_close_component = llc_close,
        .mca_register_component_params = llc_register,
    },
    .btl_data = {.param_field = MCA_BASE_METADATA_PARAM_NONE},
    .btl_init = llc_init,
    .btl_progress = llc_progress,
};

static mca_btl_base_module_t llc_module;

/* ----- parameters ----- */

static void reg_string(const char *name, const char *help, char **storage, const char *def)
{
    *storage = (char *) def;
    (void) mca_base_component_var_register(&mca_btl_llc_component.btl_version, name, help,
                                           MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0, OPAL_INFO_LVL_4,
                                           MCA_BASE_VAR_SCOPE_READONLY, storage);
}

static void reg_int(const char *name, const char *help, int *storage, int def)
{
    *storage = def;
    (void) mca_base_component_var_register(&mca_btl_llc_component.btl_version, name, help,
                                           MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_4,
                                           MCA_BASE_VAR_SCOPE_READONLY, storage);
}

static void reg_bool(const char *name, const char *help, bool *storage, bool def)
{
    *storage = def;
    (void) mca_base_component_var_register(&mca_btl_llc_component.btl_version, name, help,
                                           MCA_BASE_VAR_TYPE_BOOL, NULL, 0, 0, OPAL_INFO_LVL_4,
                                           MCA_BASE_VAR_SCOPE_READONLY, storage);
}

static int llc_register(void)
{
    (void) mca_base_var_group_component_register(&mca_btl_llc_component.btl_version,
                                                  "BTL over raw Ethernet with IEEE 802.2 LLC");
    reg_string("if_include",
               "Comma list of interfaces to use (default: every up Ethernet interface but"
               " loopback and bridge/bond ports); local ranks share them round-robin",
               &params.if_include, NULL);
    reg_string("if_exclude", "Comma list of interfaces not to use", &params.if_exclude, NULL);
    reg_string("if",
               "Interface of each local rank, overriding if_include/if_exclude: a comma list"
               " indexed by local rank (llc0,llc1,...) or a pattern where %d is the local rank"
               " (llc%d)",
               &params.if_spec, NULL);
    reg_string("backend", "Link backend: auto, xdp or packet", &params.backend, "auto");
    reg_int("sap", "LLC SAP (0: the stack's default, 0x7c)", &params.sap, 0);
    reg_int("port",
            "LLC transport port of the endpoint (0: any free port; each process on an"
            " interface needs its own)",
            &params.port, 0);
    reg_bool("exclusive",
             "This rank has the interface's SAP to itself (one rank per NIC): no per-port"
             " filter and no same-host path; other ranks on the interface would see its frames",
             &params.exclusive, false);
    reg_bool("progress_thread",
             "Run a background thread that keeps connections alive (acknowledgements,"
             " keepalives) while the application computes without calling MPI; without it a"
             " rank silent for longer than idle_timeout_ms looks dead to its peers",
             &params.progress_thread, true);
    reg_int("progress_interval_us",
            "How often the background thread looks whether the rank still calls MPI; after a"
            " period without a call it receives and acknowledges for the rank as frames arrive",
            &params.progress_interval_us, 1000);
    reg_int("coalesce_us",
            "Non-zero: small sends that follow another to the same peer before the next"
            " progress call wait to leave together in one frame, at that call (or, should"
            " the rank stop calling MPI, at the background thread's next look, every"
            " progress_interval_us). 0: every send leaves at once",
            &params.coalesce_us, 50);
    reg_int("idle_timeout_ms", "A peer silent this long is declared failed (0: 10 s)",
            &params.idle_timeout_ms, 0);
    reg_bool("rdma", "Offer put and get (emulated by the peer's progress) to ob1", &params.rdma,
             false);
    reg_bool("put",
             "Offer put to ob1 (without get): large contiguous messages then go from the"
             " sender's buffer straight into the receiver's, written there by the transport as"
             " frames arrive",
             &params.put, PUT_DEFAULT);
    reg_int("lend_min",
            "Send fragments of contiguous data of at least this many bytes straight from the"
            " application's buffer, without packing them, and complete them when the peer"
            " acknowledged them (0: always pack)",
            &params.lend_min, 64 * 1024);
    reg_bool("auth",
             "Authenticate every frame with a per-job key, so that no one outside the job"
             " can inject frames into it: LLC_AUTH_KEY's when set, else one that rank 0 draws"
             " and hands the other ranks through the modex. 0: frames carry no tag",
             &params.auth, true);
    reg_int("print_stats", "Print the component's counters at finalize (1: yes)",
            &params.print_stats, 0);
    reg_int("verbose", "Verbosity of btl/llc (opal_output level)", &params.verbose, 0);

    llc_module.btl_exclusivity = MCA_BTL_EXCLUSIVITY_DEFAULT;
    /* A 64 KiB message and ob1's header (at most 64 bytes) go eagerly: one
     * trip instead of a rendezvous round trip, its body lent from the
     * application's buffer (lend_min); docs/BENCHMARKS.md, "Messages of 64
     * KiB in one trip". */
    llc_module.btl_eager_limit = 64 * 1024 + 64;
    llc_module.btl_rndv_eager_limit = 64 * 1024 + 64;
    llc_module.btl_max_send_size = 256 * 1024;
    llc_module.btl_rdma_pipeline_send_length = 256 * 1024;
    llc_module.btl_rdma_pipeline_frag_size = 4 * 1024 * 1024;
    llc_module.btl_min_rdma_pipeline_size = 256 * 1024;
    llc_module.btl_latency = 1;
    llc_module.btl_bandwidth = 10000;
    llc_module.btl_flags = MCA_BTL_FLAGS_SEND;
    /* registers btl_llc_eager_limit, btl_llc_max_send_size, btl_llc_flags, ... */
    return mca_btl_base_param_register(&mca_btl_llc_component.btl_version, &llc_module);
}

static int llc_open(void)
{
    return OPAL_SUCCESS;
}

static int llc_close(void)
{
    while (free_frags) {
        llc_frag_t *f = free_frags;
        free_frags = f->next;
        llc_shim_buf_free(f->buf);
        free(f);
    }
    return OPAL_SUCCESS;
}

/* ----- callbacks from the shim (inside llc_progress) ----- */

static void on_recv(void *ctx, uint32_t peer, uint8_t tag, const uint8_t *data, size_t len)
{
    (void) ctx;
    (void) peer;
    mca_btl_active_message_callback_t *reg = mca_btl_base_active_message_trigger + tag;
    if (NULL == reg->cbfunc) {
        opal_output(0, "btl/llc: message for tag %u with no handler dropped", tag);
        return;
    }
    /* ob1 only reads the segment (homogeneous build). */
    mca_btl_base_segment_t seg = {.seg_addr.pval = (void *) data, .seg_len = len};
    mca_btl_base_descriptor_t des;
    memset(&des, 0, sizeof(des));
    des.des_segments = &seg;
    des.des_segment_count = 1;
    reg->cbfunc(&llc_module, tag, &des, reg->cbdata);
}

static void on_failure(void *ctx, uint32_t peer, bool orderly, const char *reason)
{
    (void) ctx;
    mca_btl_llc_endpoint_t *ep = peer < npeers_cap ? peers[peer] : NULL;
    if (orderly || finalizing) {
        if (ep) {
            ep->closed = 1;
        }
        opal_output_verbose(10, output, "btl/llc: peer %u closed: %s", peer, reason);
        return;
    }
    if (ep) {
        ep->failed = 1;
    }
    opal_output(0, "btl/llc: rank on %s lost its peer %s: %s", ifname,
                ep && ep->proc ? OPAL_NAME_PRINT(ep->proc->proc_name) : "(unknown)", reason);
    if (error_cb) {
        char info[256];
        snprintf(info, sizeof(info), "btl/llc: peer failed: %s", reason);
        error_cb(&llc_module, MCA_BTL_ERROR_FLAGS_FATAL, ep ? ep->proc : NULL, info);
    }
}

static int llc_progress(void)
{
    if (NULL == shim) {
        return 0;
    }
    int n = llc_shim_progress(shim);
    return n > 0 ? n : 0;
}

/* ----- module functions ----- */

/* How long add_procs waits for peers' interfaces to answer a link-level
 * probe; only peers that do not answer (another Ethernet segment) cost it. */
#define REACHABLE_TIMEOUT_MS 1000

/* Key the endpoint with the material rank 0 published (once, before the
 * first connection); OPAL_SUCCESS when it is keyed. */
static int take_job_key(void)
{
    opal_process_name_t root = OPAL_PROC_MY_NAME;
    root.vpid = 0;
    uint8_t *material = NULL;
    size_t size = 0;
    int rc;
    OPAL_MODEX_RECV_STRING(rc, AUTH_MODEX_KEY, &root, &material, &size);
    if (OPAL_SUCCESS != rc || NULL == material || 0 == size) {
        opal_output(0, "btl/llc: rank %s found no job key from rank 0 in the modex (is btl/llc"
                       " off there, or did it fail to start?); give every rank the same"
                       " LLC_AUTH_KEY, or run unauthenticated with --mca btl_llc_auth 0",
                    OPAL_NAME_PRINT(OPAL_PROC_MY_NAME));
        free(material);
        return OPAL_ERROR;
    }
    LlcShimStatus st = llc_shim_set_auth_key(shim, material, size);
    memset(material, 0, size);
    free(material);
    if (LlcShimStatus_Ok != st) {
        opal_output(0, "btl/llc: keying the endpoint failed (%d)", (int) st);
        return OPAL_ERROR;
    }
    key_pending = 0;
    return OPAL_SUCCESS;
}

static int llc_add_procs(struct mca_btl_base_module_t *btl, size_t nprocs,
                         struct opal_proc_t **procs, struct mca_btl_base_endpoint_t **endpoints,
                         struct opal_bitmap_t *reachable)
{
    (void) btl;
    if (key_pending && OPAL_SUCCESS != take_job_key()) {
        return OPAL_ERROR;
    }
    /* First every new peer's address, then one round of probes for all of
     * them: a peer whose interface does not answer is not reachable over
     * btl/llc, and ob1 takes another BTL for it (or says none reaches it). */
    char **addrs = calloc(nprocs ? nprocs : 1, sizeof(*addrs));
    bool *ok = calloc(nprocs ? nprocs : 1, sizeof(*ok));
    if (NULL == addrs || NULL == ok) {
        free(addrs);
        free(ok);
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    for (size_t i = 0; i < nprocs; i++) {
        opal_proc_t *proc = procs[i];
        if (0 == opal_compare_proc(proc->proc_name, OPAL_PROC_MY_NAME) || NULL != endpoints[i]) {
            continue; /* btl/self, or already known */
        }
        char *addr = NULL;
        size_t size = 0;
        int rc;
        OPAL_MODEX_RECV(rc, &mca_btl_llc_component.btl_version, &proc->proc_name,
                        (void **) &addr, &size);
        if (OPAL_SUCCESS != rc || NULL == addr || 0 == size || addr[size - 1] != '\0') {
            opal_output_verbose(1, output, "btl/llc: no llc address for %s",
                                OPAL_NAME_PRINT(proc->proc_name));
            free(addr);
            continue;
        }
        addrs[i] = addr;
    }
    (void) llc_shim_reachable(shim, (const char *const *) addrs, nprocs, ok,
                              REACHABLE_TIMEOUT_MS);
    int result = OPAL_SUCCESS;
    for (size_t i = 0; i < nprocs && OPAL_SUCCESS == result; i++) {
        opal_proc_t *proc = procs[i];
        char *addr = addrs[i];
        if (NULL == addr) {
            continue;
        }
        if (!ok[i]) {
            opal_output_verbose(1, output,
                                "btl/llc: %s at %s does not answer a link-level probe from %s:"
                                " not reachable over btl/llc (another Ethernet segment?)",
                                OPAL_NAME_PRINT(proc->proc_name), addr, ifname);
            continue;
        }
        uint32_t peer = 0;
        LlcShimStatus st = llc_shim_add_peer(shim, addr, &peer);
        if (LlcShimStatus_Ok != st) {
            opal_output(0, "btl/llc: cannot add peer %s at %s (%d)",
                        OPAL_NAME_PRINT(proc->proc_name), addr, (int) st);
            continue;
        }
        opal_output_verbose(5, output, "btl/llc: peer %u is %s at %s", peer,
                            OPAL_NAME_PRINT(proc->proc_name), addr);
        mca_btl_llc_endpoint_t *ep = calloc(1, sizeof(*ep));
        if (NULL == ep) {
            result = OPAL_ERR_OUT_OF_RESOURCE;
            break;
        }
        ep->proc = proc;
        ep->peer = peer;
        if (peer >= npeers_cap) {
            size_t cap = npeers_cap ? npeers_cap : 16;
            while (cap <= peer) {
                cap *= 2;
            }
            mca_btl_llc_endpoint_t **p = realloc(peers, cap * sizeof(*p));
            if (NULL == p) {
                free(ep);
                result = OPAL_ERR_OUT_OF_RESOURCE;
                break;
            }
            memset(p + npeers_cap, 0, (cap - npeers_cap) * sizeof(*p));
            peers = p;
            npeers_cap = cap;
        }
        peers[peer] = ep;
        endpoints[i] = ep;
        if (reachable) {
            opal_bitmap_set_bit(reachable, (int) i);
        }
    }
    for (size_t i = 0; i < nprocs; i++) {
        free(addrs[i]);
    }
    free(addrs);
    free(ok);
    return result;
}

static int llc_del_procs(struct mca_btl_base_module_t *btl, size_t nprocs,
                         struct opal_proc_t **procs, struct mca_btl_base_endpoint_t **endpoints)
{
    (void) btl;
    (void) procs;
    for (size_t i = 0; i < nprocs; i++) {
        mca_btl_llc_endpoint_t *ep = endpoints[i];
        if (ep && ep->peer < npeers_cap && peers[ep->peer] == ep) {
            (void) llc_shim_remove_peer(shim, ep->peer);
            peers[ep->peer] = NULL;
            free(ep);
        }
    }
    return OPAL_SUCCESS;
}

static int llc_register_error(struct mca_btl_base_module_t *btl,
                              mca_btl_base_module_error_cb_fn_t cbfunc)
{
    (void) btl;
    error_cb = cbfunc;
    return OPAL_SUCCESS;
}

static llc_frag_t *frag_new(size_t size, uint32_t flags)
{
    llc_frag_t *f = free_frags;
    /* A small buffer kept from the fragment's last use serves again. */
    LlcShimBuf *kept = NULL;
    if (f) {
        free_frags = f->next;
        kept = f->buf;
    } else {
        f = malloc(sizeof(*f));
        if (NULL == f) {
            return NULL;
        }
    }
    memset(f, 0, sizeof(*f));
    if (kept && kept->capacity >= size) {
        f->buf = kept;
    } else {
        llc_shim_buf_free(kept);
        f->buf = llc_shim_buf_alloc(size > 0 ? size : 1);
    }
    if (NULL == f->buf) {
        f->next = free_frags;
        free_frags = f;
        return NULL;
    }
    f->segments[0].seg_addr.pval = f->buf->data;
    f->segments[0].seg_len = size;
    f->base.des_segments = f->segments;
    f->base.des_segment_count = 1;
    f->base.des_flags = flags;
    f->base.order = MCA_BTL_NO_ORDER;
    return f;
}

static mca_btl_base_descriptor_t *llc_alloc(struct mca_btl_base_module_t *btl,
                                            struct mca_btl_base_endpoint_t *endpoint,
                                            uint8_t order, size_t size, uint32_t flags)
{
    (void) endpoint;
    (void) order;
    if (size > btl->btl_max_send_size) {
        return NULL;
    }
    llc_frag_t *f = frag_new(size, flags);
    return f ? &f->base : NULL;
}

static int llc_free(struct mca_btl_base_module_t *btl, mca_btl_base_descriptor_t *des)
{
    (void) btl;
    llc_frag_t *f = (llc_frag_t *) des;
    /* Small buffers stay with the fragment for its next use (their sends
     * copy them: see llc_send); others go. */
    if (f->buf && f->buf->capacity > LLC_SHIM_SEND_INLINE) {
        llc_shim_buf_free(f->buf);
        f->buf = NULL;
    }
    f->next = free_frags;
    free_frags = f;
    return OPAL_SUCCESS;
}

/* Pack up to *size bytes of the convertor at dst; *size becomes what was packed. */
static int pack(struct opal_convertor_t *convertor, void *dst, size_t *size)
{
    struct iovec iov = {.iov_base = dst, .iov_len = *size};
    uint32_t iov_count = 1;
    size_t max_data = *size;
    if (opal_convertor_pack(convertor, &iov, &iov_count, &max_data) < 0) {
        return OPAL_ERROR;
    }
    *size = max_data;
    return OPAL_SUCCESS;
}

/* A descriptor whose data stays where the application has it: segment 0 is
 * ob1's header (reserve bytes), segment 1 the contiguous data, located by
 * the convertor without copying (a NULL iov_base asks for the pointer). */
static mca_btl_base_descriptor_t *prepare_lent(struct mca_btl_base_module_t *btl,
                                               struct opal_convertor_t *convertor, size_t reserve,
                                               size_t *size, uint32_t flags)
{
    llc_frag_t *f = frag_new(reserve, flags);
    if (NULL == f) {
        return NULL;
    }
    struct iovec iov = {.iov_base = NULL, .iov_len = *size};
    uint32_t iov_count = 1;
    size_t max_data = *size;
    if (opal_convertor_pack(convertor, &iov, &iov_count, &max_data) < 0 || NULL == iov.iov_base) {
        llc_free(btl, &f->base);
        return NULL;
    }
    f->segments[1].seg_addr.pval = iov.iov_base;
    f->segments[1].seg_len = max_data;
    f->base.des_segment_count = 2;
    f->lent = 1;
    *size = max_data;
    return &f->base;
}

static mca_btl_base_descriptor_t *llc_prepare_src(struct mca_btl_base_module_t *btl,
                                                  struct mca_btl_base_endpoint_t *endpoint,
                                                  struct opal_convertor_t *convertor,
                                                  uint8_t order, size_t reserve, size_t *size,
                                                  uint32_t flags)
{
    (void) endpoint;
    (void) order;
    if (reserve > btl->btl_max_send_size) {
        return NULL;
    }
    if (*size > btl->btl_max_send_size - reserve) {
        *size = btl->btl_max_send_size - reserve;
    }
    if (params.lend_min > 0 && *size >= (size_t) params.lend_min
        && 0 == opal_convertor_need_buffers(convertor)
        && (convertor->flags & CONVERTOR_NO_OP)) {
        return prepare_lent(btl, convertor, reserve, size, flags);
    }
    llc_frag_t *f = frag_new(reserve + *size, flags);
    if (NULL == f) {
        return NULL;
    }
    if (*size > 0 && OPAL_SUCCESS != pack(convertor, (char *) f->buf->data + reserve, size)) {
        llc_free(btl, &f->base);
        return NULL;
    }
    f->segments[0].seg_len = reserve + *size;
    return &f->base;
}

static int status_to_opal(LlcShimStatus st)
{
    switch (st) {
    case LlcShimStatus_Ok:
        return OPAL_SUCCESS;
    case LlcShimStatus_Busy:
        return OPAL_ERR_OUT_OF_RESOURCE;
    case LlcShimStatus_PeerFailed:
        return OPAL_ERR_UNREACH;
    case LlcShimStatus_Invalid:
        return OPAL_ERR_BAD_PARAM;
    default:
        return OPAL_ERROR;
    }
}

/* The transport let go of a lent fragment (acknowledged, or its peer
 * failed, which the failure callback reports): the application's buffer is
 * ob1's again. Runs inside llc_progress. */
static void lent_done(void *ctx)
{
    llc_frag_t *f = ctx;
    mca_btl_base_descriptor_t *des = &f->base;
    int own = des->des_flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP;
    if (des->des_cbfunc) {
        des->des_cbfunc(&llc_module, f->endpoint, des, OPAL_SUCCESS);
    }
    if (own) {
        llc_free(&llc_module, des);
    }
}

static int llc_send(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *endpoint,
                    struct mca_btl_base_descriptor_t *des, mca_btl_base_tag_t tag)
{
    llc_frag_t *f = (llc_frag_t *) des;
    if (endpoint->failed) {
        return OPAL_ERR_UNREACH;
    }
    if (f->lent) {
        f->endpoint = endpoint;
        LlcShimStatus st = llc_shim_send_lent(
            shim, endpoint->peer, tag, f->buf->data, f->segments[0].seg_len,
            f->segments[1].seg_addr.pval, f->segments[1].seg_len, lent_done, f);
        /* On success the completion comes from lent_done, later. */
        return LlcShimStatus_Ok == st ? OPAL_SUCCESS : status_to_opal(st);
    }
    LlcShimStatus st;
    if (f->segments[0].seg_len <= LLC_SHIM_SEND_INLINE) {
        /* Small (a rendezvous control message, a short eager send): copied
         * into the transport's packet, and the buffer stays with the
         * fragment for its next use. No allocation either way. */
        st = llc_shim_send(shim, endpoint->peer, tag, f->buf->data, f->segments[0].seg_len, NULL,
                           0);
    } else {
        LlcShimBuf *buf = f->buf;
        f->buf = NULL; /* the shim owns it now, whatever happens */
        st = llc_shim_send_buf(shim, endpoint->peer, tag, buf, f->segments[0].seg_len);
    }
    if (LlcShimStatus_Ok != st) {
        return status_to_opal(st);
    }
    /* The data is with the transport: the send is complete locally. */
    int own = des->des_flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP;
    if (des->des_flags & MCA_BTL_DES_SEND_ALWAYS_CALLBACK) {
        des->des_cbfunc(btl, endpoint, des, OPAL_SUCCESS);
    }
    if (own) {
        llc_free(btl, des);
    }
    return 1;
}

static int llc_sendi(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *endpoint,
                     struct opal_convertor_t *convertor, void *header, size_t header_size,
                     size_t payload_size, uint8_t order, uint32_t flags, mca_btl_base_tag_t tag,
                     mca_btl_base_descriptor_t **descriptor)
{
    (void) order;
    (void) flags;
    if (descriptor) {
        *descriptor = NULL;
    }
    if (endpoint->failed) {
        return OPAL_ERR_UNREACH;
    }
    if (header_size + payload_size > btl->btl_eager_limit) {
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    /* An inline send must not queue: refuse while the peer's queue waits
     * for its connection or for the transport, and let ob1 retry later. */
    if (!llc_shim_can_send(shim, endpoint->peer)) {
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    if (header_size + payload_size <= LLC_SHIM_SEND_INLINE) {
        /* Small (an 8-byte MPI message behind its match header): packed on
         * the stack and copied by the shim straight into the transport's
         * packet, with no allocation on the way. */
        unsigned char small[LLC_SHIM_SEND_INLINE];
        size_t packed = payload_size;
        if (payload_size > 0 && OPAL_SUCCESS != pack(convertor, small + header_size, &packed)) {
            return OPAL_ERROR;
        }
        memcpy(small, header, header_size);
        return status_to_opal(llc_shim_send(shim, endpoint->peer, tag, small,
                                            header_size + packed, NULL, 0));
    }
    LlcShimBuf *buf = llc_shim_buf_alloc(header_size + payload_size);
    if (NULL == buf) {
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    memcpy(buf->data, header, header_size);
    size_t packed = payload_size;
    if (payload_size > 0 && OPAL_SUCCESS != pack(convertor, buf->data + header_size, &packed)) {
        llc_shim_buf_free(buf);
        return OPAL_ERROR;
    }
    LlcShimStatus st = llc_shim_send_buf(shim, endpoint->peer, tag, buf, header_size + packed);
    return status_to_opal(st);
}

static void rma_done(void *ctx, LlcShimStatus status)
{
    llc_rma_t *r = ctx;
    r->cbfunc(&llc_module, r->endpoint, r->local_address, r->local_handle, r->cbcontext,
              r->cbdata, LlcShimStatus_Ok == status ? OPAL_SUCCESS : OPAL_ERROR);
    free(r);
}

static int llc_rdma(int is_put, struct mca_btl_base_endpoint_t *endpoint, void *local_address,
                    uint64_t remote_address, mca_btl_base_registration_handle_t *local_handle,
                    mca_btl_base_registration_handle_t *remote_handle, size_t size,
                    mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext, void *cbdata)
{
    if (endpoint->failed) {
        return OPAL_ERR_UNREACH;
    }
    if (NULL == remote_handle || remote_address < remote_handle->base) {
        return OPAL_ERR_BAD_PARAM;
    }
    llc_rma_t *r = malloc(sizeof(*r));
    if (NULL == r) {
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    *r = (llc_rma_t){cbfunc, endpoint, local_address, local_handle, cbcontext, cbdata};
    uint64_t offset = remote_address - remote_handle->base;
    LlcShimStatus st = is_put ? llc_shim_put(shim, endpoint->peer, local_address, size,
                                             remote_handle->key, offset, rma_done, r)
                              : llc_shim_get(shim, endpoint->peer, local_address, size,
                                             remote_handle->key, offset, rma_done, r);
    if (LlcShimStatus_Ok != st) {
        free(r);
        return status_to_opal(st);
    }
    return OPAL_SUCCESS;
}

static int llc_put(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *endpoint,
                   void *local_address, uint64_t remote_address,
                   mca_btl_base_registration_handle_t *local_handle,
                   mca_btl_base_registration_handle_t *remote_handle, size_t size, int flags,
                   int order, mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
                   void *cbdata)
{
    (void) btl;
    (void) flags;
    (void) order;
    return llc_rdma(1, endpoint, local_address, remote_address, local_handle, remote_handle, size,
                    cbfunc, cbcontext, cbdata);
}

static int llc_get(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *endpoint,
                   void *local_address, uint64_t remote_address,
                   mca_btl_base_registration_handle_t *local_handle,
                   mca_btl_base_registration_handle_t *remote_handle, size_t size, int flags,
                   int order, mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
                   void *cbdata)
{
    (void) btl;
    (void) flags;
    (void) order;
    return llc_rdma(0, endpoint, local_address, remote_address, local_handle, remote_handle, size,
                    cbfunc, cbcontext, cbdata);
}

static mca_btl_base_registration_handle_t *llc_register_mem(struct mca_btl_base_module_t *btl,
                                                            struct mca_btl_base_endpoint_t *ep,
                                                            void *base, size_t size,
                                                            uint32_t flags)
{
    (void) ep;
    /* Offered put alone, ob1 registers a message's buffer for remote reads
     * only to send it by its RDMA protocol (a handshake, then one put into
     * the receiver's buffer; nobody reads remotely). Refused below
     * btl_min_rdma_pipeline_size, a message goes by ob1's rendezvous,
     * send/receive, which is faster there (docs/BENCHMARKS.md, "Puts where
     * both ends send"). */
    if (!params.rdma && (flags & MCA_BTL_REG_FLAG_REMOTE_READ) &&
        size < btl->btl_min_rdma_pipeline_size) {
        return NULL;
    }
    mca_btl_base_registration_handle_t *h = malloc(sizeof(*h));
    if (NULL == h) {
        return NULL;
    }
    if (LlcShimStatus_Ok != llc_shim_register(shim, base, size, &h->key)) {
        free(h);
        return NULL;
    }
    h->base = (uint64_t) (uintptr_t) base;
    return h;
}

static int llc_deregister_mem(struct mca_btl_base_module_t *btl,
                              mca_btl_base_registration_handle_t *handle)
{
    (void) btl;
    (void) llc_shim_deregister(shim, handle->key);
    free(handle);
    return OPAL_SUCCESS;
}

static int llc_flush(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *endpoint)
{
    (void) btl;
    (void) endpoint;
    return LlcShimStatus_Ok == llc_shim_flush(shim, 60000) ? OPAL_SUCCESS : OPAL_ERROR;
}

static int llc_finalize(struct mca_btl_base_module_t *btl)
{
    (void) btl;
    if (NULL == shim) {
        return OPAL_SUCCESS;
    }
    finalizing = 1;
    if (LlcShimStatus_Ok != llc_shim_flush(shim, 5000)) {
        opal_output(0, "btl/llc: finalize: not everything sent was acknowledged within 5 s");
    }
    if (params.print_stats) {
        LlcShimStats s;
        llc_shim_stats(shim, &s);
        char fp[32] = "off";
        size_t fpn = llc_shim_auth_fingerprint(shim, fp, sizeof(fp));
        if (0 == fpn || fpn > sizeof(fp)) {
            snprintf(fp, sizeof(fp), "off");
        }
        fprintf(stderr,
                "btl/llc stats: rank %s local %d if %s transport %s: sent %llu msgs %llu B,"
                " received %llu msgs %llu B, queued %llu, puts %llu, gets %llu,"
                " peers failed %llu, background rounds %llu, retransmits %llu (timeouts %llu,"
                " of them spurious %llu; tail probes %llu; loss episodes %llu),"
                " frames dropped %llu (by the kernel %llu), lent %llu, bundles %llu (messages %llu),"
                " auth %s (dropped %llu)\n",
                OPAL_NAME_PRINT(OPAL_PROC_MY_NAME), local_rank, ifname, transport_name,
                (unsigned long long) s.sent, (unsigned long long) s.sent_bytes,
                (unsigned long long) s.received, (unsigned long long) s.received_bytes,
                (unsigned long long) s.queued, (unsigned long long) s.puts,
                (unsigned long long) s.gets, (unsigned long long) s.peers_failed,
                (unsigned long long) s.background_rounds, (unsigned long long) s.retransmits,
                (unsigned long long) s.timeouts, (unsigned long long) s.spurious_timeouts,
                (unsigned long long) s.tail_probes, (unsigned long long) s.loss_episodes,
                (unsigned long long) s.frames_dropped,
                (unsigned long long) s.device_drops,
                (unsigned long long) s.sent_lent, (unsigned long long) s.bundles,
                (unsigned long long) s.bundled, fp, (unsigned long long) s.auth_dropped);
    }
    llc_shim_close(shim, 2000);
    shim = NULL;
    for (size_t i = 0; i < npeers_cap; i++) {
        free(peers[i]);
    }
    free(peers);
    peers = NULL;
    npeers_cap = 0;
    return OPAL_SUCCESS;
}

static mca_btl_base_module_t llc_module = {
    .btl_component = &mca_btl_llc_component,
    .btl_add_procs = llc_add_procs,
    .btl_del_procs = llc_del_procs,
    .btl_finalize = llc_finalize,
    .btl_alloc = llc_alloc,
    .btl_free = llc_free,
    .btl_prepare_src = llc_prepare_src,
    .btl_send = llc_send,
    .btl_sendi = llc_sendi,
    .btl_put = llc_put,
    .btl_get = llc_get,
    .btl_dump = mca_btl_base_dump,
    .btl_register_mem = llc_register_mem,
    .btl_deregister_mem = llc_deregister_mem,
    .btl_register_error = llc_register_error,
    .btl_flush = llc_flush,
};

/* ----- init ----- */

/* The interface of local rank `rank` per the spec; 0 on success. */
static int pick_interface(const char *spec, int rank, char *out, size_t len)
{
    if (NULL == spec || '\0' == spec[0]) {
        return -1;
    }
    if (strchr(spec, '%')) {
        snprintf(out, len, spec, rank);
        return 0;
    }
    int count = 1;
    for (const char *p = spec; *p; p++) {
        count += (',' == *p);
    }
    int want = rank % count;
    const char *start = spec;
    for (int i = 0; i < want; i++) {
        start = strchr(start, ',') + 1;
    }
    size_t n = strcspn(start, ",");
    if (n == 0 || n >= len) {
        return -1;
    }
    memcpy(out, start, n);
    out[n] = '\0';
    return 0;
}

/* The interface local rank `rank` opens, as llc_init picks it; 0 on success. */
static int interface_of(int rank, char *out, size_t len)
{
    if (NULL != params.if_spec && '\0' != params.if_spec[0]) {
        return pick_interface(params.if_spec, rank, out, len);
    }
    char err[512] = "";
    return LlcShimStatus_Ok == llc_shim_select_interface(params.if_include, params.if_exclude,
                                                         (uint32_t) rank, out, len, err,
                                                         sizeof(err))
               ? 0
               : -1;
}

/* How many of this host's ranks open interface `name` (this one included; 0
 * when the host's rank count is unknown): one tells backend auto the rank is
 * alone on its interface. */
static uint32_t ranks_on(const char *name)
{
    const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int local_size = ls ? atoi(ls) : opal_process_info.num_local_peers + 1;
    if (local_size <= 0) {
        return 0;
    }
    uint32_t n = 0;
    for (int r = 0; r < local_size; r++) {
        char other[64];
        if (0 == interface_of(r, other, sizeof(other)) && 0 == strcmp(other, name)) {
            n++;
        }
    }
    return n;
}

static mca_btl_base_module_t **llc_init(int *num_btls, bool progress_threads, bool mpi_threads)
{
    (void) progress_threads;
    (void) mpi_threads;
    *num_btls = 0;
    output = opal_output_open(NULL);
    opal_output_set_verbosity(output, params.verbose);

    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    local_rank = lr ? atoi(lr) : opal_process_info.my_local_rank;
    if (NULL != params.if_spec && '\0' != params.if_spec[0]) {
        if (0 != pick_interface(params.if_spec, local_rank, ifname, sizeof(ifname))) {
            opal_output(0, "btl/llc: btl_llc_if=%s names no interface for local rank %d (use a"
                           " comma list indexed by local rank, or a pattern like llc%%d)",
                        params.if_spec, local_rank);
            return NULL;
        }
    } else {
        char err[512] = "";
        if (LlcShimStatus_Ok != llc_shim_select_interface(params.if_include, params.if_exclude,
                                                          (uint32_t) local_rank, ifname,
                                                          sizeof(ifname), err, sizeof(err))) {
            opal_output(0, "btl/llc: %s (btl_llc_if_include / btl_llc_if_exclude)", err);
            return NULL;
        }
    }
    if (params.sap < 0 || params.sap > 255 || params.port < 0 || params.port > 65535) {
        opal_output(0, "btl/llc: btl_llc_sap must be 0..255 and btl_llc_port 0..65535");
        return NULL;
    }
    LlcShimConfig cfg = {
        .ifname = ifname,
        .backend = params.backend,
        .sap = (uint8_t) params.sap,
        .port = (uint16_t) params.port,
        .idle_timeout_ms = (uint32_t) (params.idle_timeout_ms > 0 ? params.idle_timeout_ms : 0),
        .progress_thread = params.progress_thread,
        .exclusive = params.exclusive,
        .progress_interval_us = (uint32_t) (params.progress_interval_us > 0
                                                ? params.progress_interval_us
                                                : 0),
        .coalesce_us = (uint32_t) (params.coalesce_us > 0 ? params.coalesce_us : 0),
        .ranks_on_interface = ranks_on(ifname),
    };
    /* The key: none when turned off; LLC_AUTH_KEY's when the environment
     * gives one (the shim reads it; set but empty fails the open); else
     * rank 0's, drawn below and taken from the modex at add_procs. */
    const char *env_key = getenv("LLC_AUTH_KEY");
    int rank0 = 0 == OPAL_PROC_MY_NAME.vpid;
    if (!params.auth) {
        cfg.auth = LLC_SHIM_AUTH_OFF;
    } else if (NULL != env_key) {
        cfg.auth = LLC_SHIM_AUTH_ENV;
    } else {
        cfg.auth = LLC_SHIM_AUTH_LATER;
    }
    char err[512] = "";
    if (LlcShimStatus_Ok != llc_shim_open(&cfg, &shim, err, sizeof(err))) {
        opal_output(0, "btl/llc: local rank %d: %s", local_rank, err);
        shim = NULL;
        return NULL;
    }
    char addr[128];
    size_t need = llc_shim_addr(shim, addr, sizeof(addr));
    if (need == 0 || need > sizeof(addr)) {
        opal_output(0, "btl/llc: endpoint address too long");
        llc_shim_close(shim, 0);
        shim = NULL;
        return NULL;
    }
    (void) llc_shim_transport_name(shim, transport_name, sizeof(transport_name));
    int rc;
    OPAL_MODEX_SEND(rc, OPAL_PMIX_GLOBAL, &mca_btl_llc_component.btl_version, addr, need);
    if (OPAL_SUCCESS != rc) {
        opal_output(0, "btl/llc: publishing the address failed (%d)", rc);
        llc_shim_close(shim, 0);
        shim = NULL;
        return NULL;
    }
    if (LLC_SHIM_AUTH_LATER == cfg.auth && rank0) {
        /* The job's key: drawn here, handed on by the launcher's PMIx
         * server with the addresses, never printed. */
        char material[LLC_SHIM_KEY_MATERIAL_LEN];
        if (LlcShimStatus_Ok != llc_shim_new_auth_key(shim, material, sizeof(material))) {
            opal_output(0, "btl/llc: drawing the job's key failed");
            llc_shim_close(shim, 0);
            shim = NULL;
            return NULL;
        }
        OPAL_MODEX_SEND_STRING(rc, OPAL_PMIX_GLOBAL, AUTH_MODEX_KEY, material,
                               strlen(material));
        memset(material, 0, sizeof(material));
        if (OPAL_SUCCESS != rc) {
            opal_output(0, "btl/llc: publishing the job's key failed (%d)", rc);
            llc_shim_close(shim, 0);
            shim = NULL;
            return NULL;
        }
    } else if (LLC_SHIM_AUTH_LATER == cfg.auth) {
        key_pending = 1;
    }
    llc_shim_set_failure_handler(shim, on_failure, NULL);
    for (int tag = 0; tag < MCA_BTL_TAG_MAX; tag++) {
        llc_shim_set_recv_handler(shim, (uint8_t) tag, on_recv, NULL);
    }
    if (params.rdma) {
        llc_module.btl_flags |= MCA_BTL_FLAGS_PUT | MCA_BTL_FLAGS_GET;
    } else if (params.put) {
        llc_module.btl_flags |= MCA_BTL_FLAGS_PUT;
        llc_module.btl_flags &= ~(uint32_t) MCA_BTL_FLAGS_GET;
        llc_module.btl_get = NULL;
    } else {
        llc_module.btl_flags &= ~(uint32_t) (MCA_BTL_FLAGS_PUT | MCA_BTL_FLAGS_GET);
        llc_module.btl_put = NULL;
        llc_module.btl_get = NULL;
        llc_module.btl_register_mem = NULL;
        llc_module.btl_deregister_mem = NULL;
    }
    llc_module.btl_registration_handle_size = sizeof(mca_btl_base_registration_handle_t);
    llc_module.btl_get_limit = SIZE_MAX;
    llc_module.btl_put_limit = SIZE_MAX;
    llc_module.btl_get_alignment = 0;
    llc_module.btl_put_alignment = 0;
    llc_module.btl_get_local_registration_threshold = SIZE_MAX;
    llc_module.btl_put_local_registration_threshold = SIZE_MAX;
    char fp[32] = "";
    size_t fpn = llc_shim_auth_fingerprint(shim, fp, sizeof(fp));
    opal_output_verbose(1, output, "btl/llc: local rank %d on %s (%s) at %s, frames %s%s",
                        local_rank, ifname, transport_name, addr,
                        key_pending ? "to be keyed by rank 0"
                        : (fpn > 0 && fpn <= sizeof(fp)) ? "keyed, key fingerprint "
                                                          : "not authenticated",
                        (!key_pending && fpn > 0 && fpn <= sizeof(fp)) ? fp : "");

    mca_btl_base_module_t **btls = malloc(sizeof(*btls));
    if (NULL == btls) {
        llc_shim_close(shim, 0);
        shim = NULL;
        return NULL;
    }
    btls[0] = &llc_module;
    *num_btls = 1;
    return btls;
}
