#include <bmi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {        /* server: ./app s ADDR   client: ./app c ADDR */
    int server = argv[1][0] == 's', out;
    bmi_context_id ctx;
    bmi_op_id_t op;
    bmi_error_code_t err;
    bmi_size_t got;
    char buf[64] = "hello from the client";
    if (argc != 3) return 2;
    BMI_initialize("bmi_llc,bmi_tcp", server ? argv[2] : NULL, server ? BMI_INIT_SERVER : 0);
    BMI_open_context(&ctx);
    if (server) {                                          /* one request, one reply */
        struct BMI_unexpected_info req;
        printf("listening at %s\n", argv[2]), fflush(stdout);
        do BMI_testunexpected(1, &out, &req, 1000); while (out == 0);
        printf("request from %s: %s\n", BMI_addr_rev_lookup(req.addr), (char *)req.buffer);
        if (BMI_post_send(&op, req.addr, "hello back", 11, BMI_EXT_ALLOC, 2, NULL, ctx) == 0)
            BMI_test(op, &out, &err, &got, NULL, 10000, ctx);
        BMI_unexpected_free(req.addr, req.buffer);
    } else {
        bmi_addr_t srv;
        BMI_addr_lookup(&srv, argv[2]);                    /* [MAC]:PORT or HOST:PORT */
        BMI_post_sendunexpected(&op, srv, buf, strlen(buf) + 1, BMI_EXT_ALLOC, 1, NULL, ctx);
        if (BMI_post_recv(&op, srv, buf, sizeof buf, &got, BMI_EXT_ALLOC, 2, NULL, ctx) == 0)
            BMI_test(op, &out, &err, &got, NULL, 10000, ctx);
        printf("reply: %s (%lld bytes)\n", buf, (long long)got);
    }
    BMI_close_context(ctx);
    return BMI_finalize();
}
