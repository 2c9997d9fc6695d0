// Coefficients of R(a) = erfcx(a/sqrt2)/2 ~ P(a)/Q(a) on [0, 15] (Q0 = 1):
// a (4,5) rational fit, max relative error 6.7e-9, all coefficients positive
// (Horner is then free of cancellation). Used by gelu_math.inc via each ISA's
// vfrac_d primitive, which evaluates it in double.
#pragma once
#define GELU_R_P0 0.5000000033308312
#define GELU_R_P1 0.4402031111885555
#define GELU_R_P2 0.18465349189860034
#define GELU_R_P3 0.04111262930187454
#define GELU_R_P4 0.004187795476858047
#define GELU_R_Q1 1.678291253796034
#define GELU_R_Q2 1.2083843492993755
#define GELU_R_Q3 0.47321590130897007
#define GELU_R_Q4 0.10305989840973329
#define GELU_R_Q5 0.010497142045231167

// f * P(a) / Q(a), double Horner; D is double or a double vector type with
// FMA(a, b, c) and SET(v) supplied by the caller.
#define GELU_R_EVAL(D, FMA, SET, a, out_p, out_q)                 \
  do {                                                            \
    D p_ = SET(GELU_R_P4);                                        \
    p_ = FMA(p_, a, SET(GELU_R_P3));                              \
    p_ = FMA(p_, a, SET(GELU_R_P2));                              \
    p_ = FMA(p_, a, SET(GELU_R_P1));                              \
    out_p = FMA(p_, a, SET(GELU_R_P0));                           \
    D q_ = SET(GELU_R_Q5);                                        \
    q_ = FMA(q_, a, SET(GELU_R_Q4));                              \
    q_ = FMA(q_, a, SET(GELU_R_Q3));                              \
    q_ = FMA(q_, a, SET(GELU_R_Q2));                              \
    q_ = FMA(q_, a, SET(GELU_R_Q1));                              \
    out_q = FMA(q_, a, SET(1.0));                                 \
  } while (0)
