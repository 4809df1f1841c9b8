/* The example program of seed 000, appendix B, unchanged but for the
 * <string.h> the seed leaves out (strcpy). It packs a char, a long, ten
 * floats and a string into a message, then unpacks and prints them. */
#include <string.h>
#include <deck.h>
#include <stdio.h>

#define SIZE 128

int main(int argc, char **argv)
{
    deck_msg_t msg;
    deck_mbox_t mbox;
    unsigned long node, numnode;
    char caractere;
    unsigned long inteiro, i, j;
    float vetor[10];
    char string[6];

    deck_init(&argc, &argv);

    deck_msg_create(&msg, SIZE);
    printf("DEBUG nó%d: cria msg\n", node);

    deck_msg_create(&msg, SIZE);
    printf("DEBUG nó%d: cria msg\n", node);

    caractere='L';
    printf("DEBUG nó%d: atribui caractere\n", node);

    inteiro=deck_node();
    printf("DEBUG nó%d: atribui inteiro\n", node);

    strcpy(string, "GPPD!");
    printf("DEBUG nó%d: atribui string\n", node);

    for (i=0; i<10; i++)
        vetor[i]=inteiro*i;

    printf("DEBUG nó%d: atribui vetor\n", node);

    deck_msg_pack(&msg, DECK_CHAR, &caractere, 1);
    printf("DEBUG nó%d: empacota caractere\n", node);

    deck_msg_pack(&msg, DECK_LONG, &inteiro, 1);
    printf("DEBUG nó%d: empacota inteiro\n", node);

    deck_msg_pack(&msg, DECK_FLOAT, &vetor, 10);
    printf("DEBUG nó%d: empacota vetor\n", node);

    deck_msg_pack(&msg, DECK_CHAR, string, 6);
    printf("DEBUG nó%d: empacota string\n", node);

    deck_msg_reset(&msg);
    printf("DEBUG nó%d: reset message \n", node);

    deck_msg_unpack(&msg, DECK_CHAR, &caractere, 1);
    printf("DEBUG nó%d: desempacota caractere\n", node);

    deck_msg_unpack(&msg, DECK_LONG, &inteiro, 1);
    printf("DEBUG nó%d: desempacota inteiro\n", node);

    deck_msg_unpack(&msg, DECK_FLOAT, &vetor, 10);
    printf("DEBUG nó%d: desempacota vetor\n", node);

    deck_msg_unpack(&msg, DECK_CHAR, string, 6);
    printf("DEBUG nó%d: desempacota string\n", node);

    printf("DEBUG nó%d: inteiro = %d\n", node, inteiro);

    printf("DEBUG nó%d: caractere = %c\n", node, caractere);

    printf("DEBUG nó%d: string = %s\n", node, string);

    for(j=0; j<(sizeof(vetor)/sizeof(float)); j++)
        printf("DEBUG nó%d: vetor[%d] = %f\n\n", node, j, vetor[j]);

    deck_msg_destroy(&msg);

    deck_done();
    return(0);
}
