/*
 * insn_count: a qemu-user TCG plugin (plugin API version 1, qemu 7.2) that counts the guest
 * instructions a program executes, and how many of them are SIMD (vector) or scalar
 * floating-point instructions. Built by benchmarks/arm_qemu.py against the qemu-plugin.h of the
 * installed qemu; run as
 *
 *     qemu-aarch64 -plugin insn_count.so,out=COUNTS.txt PROGRAM ...
 *
 * and COUNTS.txt receives "insns N", "simd N" and "fp N" when the program exits. With
 * blocks=BLOCKS.txt as well, BLOCKS.txt receives one line per translated block, "VADDR INSNS
 * EXECUTIONS" (hexadecimal address; a block translated twice has two lines), from which
 * benchmarks/arm_profile.py attributes the count to functions and instructions.
 *
 * Instructions are classified once, when qemu translates a block; each execution of the block
 * then adds the block's totals (one callback per block, atomics so that threaded guests count
 * right). The classes, from the Arm Architecture Reference Manual's encoding tables:
 *
 * aarch64 (A64), bits of the 32-bit opcode:
 *   simd: Advanced SIMD vector data processing (op0 = 0xx0, bits 27:25 = 111: three-same,
 *         by-element, permute, modified-immediate, AES, ...), LD1-LD4/ST1-ST4 (single and
 *         multiple structures) and loads/stores/pairs of 128-bit Q registers.
 *   fp:   scalar floating-point data processing (op0 = x0x1), Advanced SIMD scalar forms
 *         (op0 = 01x1), and loads/stores of 8- to 64-bit SIMD&FP registers (b/h/s/d; a d
 *         register holding two floats cannot be told apart, so it counts as scalar).
 * armv7 (A32 and Thumb-2; qemu-arm runs both, gcc's Debian armhf default is Thumb-2):
 *   simd: NEON data processing (A32 0xF2/0xF3 prefix; Thumb 111x 1111) and NEON element and
 *         structure loads/stores VLDn/VSTn (A32 0xF4 with bit 20 clear; Thumb 0xF9).
 *   fp:   VFP data processing and VFP register loads/stores (coprocessor 10/11 encodings),
 *         including the ARMv8 0xFE forms (VSEL, VMAXNM, VRINT).
 *   A block is Thumb when one of its instructions is 16 bits wide or at an address that is 2
 *   modulo 4, or when every 32-bit word has a Thumb-2 first halfword (bits 15:11 = 11101,
 *   11110 or 11111); otherwise A32. (A block of only such words that is in fact A32, like a
 *   lone `bx lr`, is taken as Thumb; such blocks are rare and short.)
 * NEON-to-core transfers (VMOV scalar, VDUP from a core register) count as neither.
 * riscv64 (RV64GC and the V extension 1.0):
 *   simd: vector instructions (major opcode OP-V) but vsetvli/vsetivli/vsetvl, which only set
 *         the vector length, and vector loads/stores (LOAD-FP/STORE-FP with a vector width).
 *   fp:   scalar floating-point (OP-FP, the fused multiply-adds), scalar FP loads/stores and
 *         their compressed forms (c.fld, c.fsd, c.fldsp, c.fsdsp).
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qemu-plugin.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

typedef enum { GUEST_AARCH64, GUEST_ARM, GUEST_RISCV64 } guest_isa;

typedef struct block_counts {
    uint64_t insns;
    uint64_t simd;
    uint64_t fp;
    uint64_t vaddr;
    uint64_t executions;
    struct block_counts *next; /* every block, for the blocks= profile */
} block_counts;

typedef enum { CLASS_OTHER, CLASS_SIMD, CLASS_FP } insn_class;

static guest_isa isa;
static const char *out_path;
static const char *blocks_path;
static block_counts *all_blocks;
static uint64_t total_insns, total_simd, total_fp;

static uint32_t load_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static insn_class classify_a64(uint32_t w)
{
    if ((w & 0x9E000000u) == 0x0E000000u) { /* op0 = 0xx0, 111x: Advanced SIMD vector */
        return CLASS_SIMD;
    }
    if ((w & 0x5E000000u) == 0x1E000000u || (w & 0xDE000000u) == 0x5E000000u) {
        return CLASS_FP; /* scalar FP data processing; Advanced SIMD scalar */
    }
    if ((w & 0x0A000000u) == 0x08000000u && (w & 0x04000000u) != 0) { /* loads/stores, V = 1 */
        uint32_t top = w & 0xBF000000u;
        if (top == 0x0C000000u || top == 0x0D000000u) { /* LDn/STn structures */
            return CLASS_SIMD;
        }
        switch ((w >> 28) & 3u) {
        case 3: /* load/store register: size 00 with opc 1x is a Q register */
            return (w >> 30) == 0 && ((w >> 23) & 1u) ? CLASS_SIMD : CLASS_FP;
        case 2: /* load/store pair: opc 10 is Q */
        case 1: /* load literal: opc 10 is Q */
            return (w >> 30) == 2 ? CLASS_SIMD : CLASS_FP;
        default:
            return CLASS_FP;
        }
    }
    return CLASS_OTHER;
}

static insn_class classify_vfp(uint32_t w)
{
    /* Coprocessor 10/11 (bits 11:9 = 101): data processing (bits 27:24 = 1110, bit 4 = 0) and
     * register loads/stores (bits 27:25 = 110); the condition field may be anything. */
    if ((w & 0x0F000E10u) == 0x0E000A00u || (w & 0x0E000E00u) == 0x0C000A00u) {
        return CLASS_FP;
    }
    return CLASS_OTHER;
}

static insn_class classify_a32(uint32_t w)
{
    if ((w & 0xFE000000u) == 0xF2000000u || (w & 0xFF100000u) == 0xF4000000u) {
        return CLASS_SIMD;
    }
    return classify_vfp(w);
}

static insn_class classify_t32(uint32_t t) /* t: first halfword in bits 31:16 */
{
    if ((t & 0xEF000000u) == 0xEF000000u || (t & 0xFF100000u) == 0xF9000000u) {
        return CLASS_SIMD;
    }
    return classify_vfp(t);
}

static bool thumb2_first_halfword(uint32_t halfword)
{
    return (halfword >> 11) >= 0x1Du;
}

static bool block_is_thumb(struct qemu_plugin_tb *tb, size_t n)
{
    size_t i;
    bool all_thumb2_words = true;
    for (i = 0; i < n; ++i) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        const unsigned char *bytes = qemu_plugin_insn_data(insn);
        if (qemu_plugin_insn_size(insn) != 4 || (qemu_plugin_insn_vaddr(insn) & 3u) != 0) {
            return true;
        }
        all_thumb2_words = all_thumb2_words && thumb2_first_halfword(load_le32(bytes) & 0xFFFFu);
    }
    return all_thumb2_words;
}

static insn_class classify_rv(const unsigned char *bytes, size_t size)
{
    uint32_t w, opcode, width;
    if (size == 2) {
        uint32_t h = (uint32_t)bytes[0] | (uint32_t)bytes[1] << 8, funct3 = (h >> 13) & 7u;
        bool fp_memory = ((h & 3u) == 0 || (h & 3u) == 2) && (funct3 == 1 || funct3 == 5);
        return fp_memory ? CLASS_FP : CLASS_OTHER;
    }
    if (size != 4) {
        return CLASS_OTHER;
    }
    w = load_le32(bytes);
    opcode = w & 0x7Fu;
    width = (w >> 12) & 7u;
    if (opcode == 0x57u) { /* OP-V; funct3 111 is vsetvli and its kin */
        return width == 7 ? CLASS_OTHER : CLASS_SIMD;
    }
    if (opcode == 0x07u || opcode == 0x27u) { /* LOAD-FP / STORE-FP: widths 1-4 scalar, else vector */
        return width >= 1 && width <= 4 ? CLASS_FP : CLASS_SIMD;
    }
    if (opcode == 0x53u || opcode == 0x43u || opcode == 0x47u || opcode == 0x4Bu || opcode == 0x4Fu) {
        return CLASS_FP;
    }
    return CLASS_OTHER;
}

static insn_class classify(const unsigned char *bytes, size_t size, bool thumb)
{
    uint32_t w;
    if (isa == GUEST_RISCV64) {
        return classify_rv(bytes, size);
    }
    if (size != 4) {
        return CLASS_OTHER; /* 16-bit Thumb instructions are never NEON or VFP */
    }
    w = load_le32(bytes);
    if (isa == GUEST_AARCH64) {
        return classify_a64(w);
    }
    if (thumb) {
        return classify_t32((w << 16) | (w >> 16));
    }
    return classify_a32(w);
}

static void block_executed(unsigned int vcpu_index, void *userdata)
{
    const block_counts *c = userdata;
    (void)vcpu_index;
    __atomic_fetch_add(&total_insns, c->insns, __ATOMIC_RELAXED);
    __atomic_fetch_add(&total_simd, c->simd, __ATOMIC_RELAXED);
    __atomic_fetch_add(&total_fp, c->fp, __ATOMIC_RELAXED);
    if (blocks_path != NULL) {
        __atomic_fetch_add((uint64_t *)&c->executions, 1, __ATOMIC_RELAXED);
    }
}

static void block_translated(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    size_t n = qemu_plugin_tb_n_insns(tb), i;
    bool thumb = isa == GUEST_ARM && block_is_thumb(tb, n);
    /* One record per translation: qemu keeps no handle to free it by, and a program translates
     * each block a few times at most, so the records stay small. */
    block_counts *c = calloc(1, sizeof *c);
    (void)id;
    if (c == NULL) {
        abort();
    }
    c->insns = n;
    c->vaddr = qemu_plugin_tb_vaddr(tb);
    c->next = __atomic_exchange_n(&all_blocks, c, __ATOMIC_ACQ_REL);
    for (i = 0; i < n; ++i) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        insn_class k = classify(qemu_plugin_insn_data(insn), qemu_plugin_insn_size(insn), thumb);
        c->simd += k == CLASS_SIMD;
        c->fp += k == CLASS_FP;
    }
    qemu_plugin_register_vcpu_tb_exec_cb(tb, block_executed, QEMU_PLUGIN_CB_NO_REGS, c);
}

static void write_blocks(void)
{
    const block_counts *c;
    FILE *f = fopen(blocks_path, "w");
    if (f == NULL) {
        perror(blocks_path);
        return;
    }
    for (c = all_blocks; c != NULL; c = c->next) {
        if (c->executions != 0) {
            fprintf(f, "%" PRIx64 " %" PRIu64 " %" PRIu64 "\n", c->vaddr, c->insns, c->executions);
        }
    }
    fclose(f);
}

static void program_exited(qemu_plugin_id_t id, void *userdata)
{
    FILE *f = fopen(out_path, "w");
    (void)id;
    (void)userdata;
    if (f == NULL) {
        perror(out_path);
        return;
    }
    fprintf(f, "insns %" PRIu64 "\nsimd %" PRIu64 "\nfp %" PRIu64 "\n", total_insns, total_simd, total_fp);
    fclose(f);
    if (blocks_path != NULL) {
        write_blocks();
    }
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
    int i;
    for (i = 0; i < argc; ++i) {
        if (strncmp(argv[i], "out=", 4) == 0) {
            out_path = argv[i] + 4;
        } else if (strncmp(argv[i], "blocks=", 7) == 0) {
            blocks_path = argv[i] + 7;
        } else {
            fprintf(stderr, "insn_count: unknown argument '%s' (give out=PATH [blocks=PATH])\n", argv[i]);
            return 1;
        }
    }
    if (out_path == NULL) {
        fprintf(stderr, "insn_count: give out=PATH\n");
        return 1;
    }
    if (strcmp(info->target_name, "aarch64") == 0) {
        isa = GUEST_AARCH64;
    } else if (strcmp(info->target_name, "arm") == 0) {
        isa = GUEST_ARM;
    } else if (strcmp(info->target_name, "riscv64") == 0) {
        isa = GUEST_RISCV64;
    } else {
        fprintf(stderr, "insn_count: guest '%s' is not aarch64, arm or riscv64\n", info->target_name);
        return 1;
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, block_translated);
    qemu_plugin_register_atexit_cb(id, program_exited, NULL);
    return 0;
}
