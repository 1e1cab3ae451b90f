#include "textflag.h"

// func sqDistsAVX2(p, rows *float32, d, k int, mask *[8]int32, out *float32)
//
// For each row: eight lanes start at zero; each group of eight floats
// adds its squared differences lane by lane (VSUBPS, VMULPS, VADDPS: no
// fused multiply-add), the last partial group through the mask (masked
// lanes load zero and add +0); then ((0+1)+(2+3))+((4+5)+(6+7)).
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
