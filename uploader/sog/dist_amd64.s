#include "textflag.h"

// func sqDistsAVX2(p, rows *float32, d, k int, mask *[8]int32, out *float32)
//
// For each row: eight lanes start at zero; each group of eight floats
// adds its squared differences lane by lane (VSUBPS, VMULPS, VADDPS: no
// fused multiply-add), the last partial group through the mask (masked
// lanes load zero and add +0); then ((0+1)+(2+3))+((4+5)+(6+7)).
//
// Eight rows at a time, each in its own register (the lanes' additions
// are the same; only independent rows run side by side), then one row at
// a time for the rest.
TEXT ·sqDistsAVX2(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), SI
	MOVQ rows+8(FP), DI
	MOVQ d+16(FP), CX
	MOVQ k+24(FP), DX
	MOVQ mask+32(FP), AX
	MOVQ out+40(FP), R8
	VMOVDQU (AX), Y15
	MOVQ CX, R9
	SHRQ $3, R9
	MOVQ CX, R10
	SHLQ $2, R10
	MOVQ CX, R11
	ANDQ $7, R11
	LEAQ (R10)(R10*2), R13 // 3 rows
	CMPQ DX, $8
	JLT row1

row8:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	MOVQ SI, BX             // p's group
	MOVQ DI, R12            // row 0's group
	LEAQ (DI)(R10*4), AX    // row 4's group
	MOVQ R9, CX
	TESTQ CX, CX
	JZ tail8

group8:
	VMOVUPS (BX), Y8
	VMOVUPS (R12), Y9
	VSUBPS Y9, Y8, Y9
	VMULPS Y9, Y9, Y9
	VADDPS Y9, Y0, Y0
	VMOVUPS (R12)(R10*1), Y10
	VSUBPS Y10, Y8, Y10
	VMULPS Y10, Y10, Y10
	VADDPS Y10, Y1, Y1
	VMOVUPS (R12)(R10*2), Y11
	VSUBPS Y11, Y8, Y11
	VMULPS Y11, Y11, Y11
	VADDPS Y11, Y2, Y2
	VMOVUPS (R12)(R13*1), Y12
	VSUBPS Y12, Y8, Y12
	VMULPS Y12, Y12, Y12
	VADDPS Y12, Y3, Y3
	VMOVUPS (AX), Y9
	VSUBPS Y9, Y8, Y9
	VMULPS Y9, Y9, Y9
	VADDPS Y9, Y4, Y4
	VMOVUPS (AX)(R10*1), Y10
	VSUBPS Y10, Y8, Y10
	VMULPS Y10, Y10, Y10
	VADDPS Y10, Y5, Y5
	VMOVUPS (AX)(R10*2), Y11
	VSUBPS Y11, Y8, Y11
	VMULPS Y11, Y11, Y11
	VADDPS Y11, Y6, Y6
	VMOVUPS (AX)(R13*1), Y12
	VSUBPS Y12, Y8, Y12
	VMULPS Y12, Y12, Y12
	VADDPS Y12, Y7, Y7
	ADDQ $32, BX
	ADDQ $32, R12
	ADDQ $32, AX
	DECQ CX
	JNZ group8

tail8:
	TESTQ R11, R11
	JZ sum8
	VMASKMOVPS (BX), Y15, Y8
	VMASKMOVPS (R12), Y15, Y9
	VSUBPS Y9, Y8, Y9
	VMULPS Y9, Y9, Y9
	VADDPS Y9, Y0, Y0
	VMASKMOVPS (R12)(R10*1), Y15, Y10
	VSUBPS Y10, Y8, Y10
	VMULPS Y10, Y10, Y10
	VADDPS Y10, Y1, Y1
	VMASKMOVPS (R12)(R10*2), Y15, Y11
	VSUBPS Y11, Y8, Y11
	VMULPS Y11, Y11, Y11
	VADDPS Y11, Y2, Y2
	VMASKMOVPS (R12)(R13*1), Y15, Y12
	VSUBPS Y12, Y8, Y12
	VMULPS Y12, Y12, Y12
	VADDPS Y12, Y3, Y3
	VMASKMOVPS (AX), Y15, Y9
	VSUBPS Y9, Y8, Y9
	VMULPS Y9, Y9, Y9
	VADDPS Y9, Y4, Y4
	VMASKMOVPS (AX)(R10*1), Y15, Y10
	VSUBPS Y10, Y8, Y10
	VMULPS Y10, Y10, Y10
	VADDPS Y10, Y5, Y5
	VMASKMOVPS (AX)(R10*2), Y15, Y11
	VSUBPS Y11, Y8, Y11
	VMULPS Y11, Y11, Y11
	VADDPS Y11, Y6, Y6
	VMASKMOVPS (AX)(R13*1), Y15, Y12
	VSUBPS Y12, Y8, Y12
	VMULPS Y12, Y12, Y12
	VADDPS Y12, Y7, Y7

sum8:
	// Per row: lanes (0+1), (2+3), (4+5), (6+7); then (01+23), (45+67);
	// then the low half plus the high one, rows 0..7 in order.
	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y5, Y4, Y4
	VHADDPS Y7, Y6, Y6
	VHADDPS Y2, Y0, Y0
	VHADDPS Y6, Y4, Y4
	VPERM2F128 $0x20, Y4, Y0, Y1
	VPERM2F128 $0x31, Y4, Y0, Y2
	VADDPS Y2, Y1, Y1
	VMOVUPS Y1, (R8)
	ADDQ $32, R8
	LEAQ (DI)(R10*8), DI
	SUBQ $8, DX
	CMPQ DX, $8
	JGE row8

row1:
	TESTQ DX, DX
	JZ done

row:
	VXORPS Y0, Y0, Y0
	XORQ BX, BX
	MOVQ R9, R12
	TESTQ R12, R12
	JZ tail

group:
	VMOVUPS (SI)(BX*1), Y1
	VMOVUPS (DI)(BX*1), Y2
	VSUBPS Y2, Y1, Y1
	VMULPS Y1, Y1, Y1
	VADDPS Y1, Y0, Y0
	ADDQ $32, BX
	DECQ R12
	JNZ group

tail:
	TESTQ R11, R11
	JZ sum
	VMASKMOVPS (SI)(BX*1), Y15, Y1
	VMASKMOVPS (DI)(BX*1), Y15, Y2
	VSUBPS Y2, Y1, Y1
	VMULPS Y1, Y1, Y1
	VADDPS Y1, Y0, Y0

sum:
	VEXTRACTF128 $1, Y0, X1
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X1, X1, X1
	VHADDPS X1, X1, X1
	VADDSS X1, X0, X0
	VMOVSS X0, (R8)
	ADDQ $4, R8
	ADDQ R10, DI
	DECQ DX
	JNZ row

done:
	VZEROUPPER
	RET

// func prefetch(p *float32)
TEXT ·prefetch(SB), NOSPLIT, $0-8
	MOVQ p+0(FP), AX
	PREFETCHT0 (AX)
	PREFETCHT0 64(AX)
	PREFETCHT0 128(AX)
	RET

// func prefetchSpan(p unsafe.Pointer, n int)
TEXT ·prefetchSpan(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ n+8(FP), CX
	LEAQ -1(AX)(CX*1), CX

span:
	PREFETCHT0 (AX)
	ADDQ $64, AX
	CMPQ AX, CX
	JBE span
	PREFETCHT0 (CX)
	RET
