/*
 * The conversion of a message's octets to CRLF line ends and the facts
 * found on the way (imapmig/mail/_crlf.c), for imapmig/mail/_octets.c, which
 * makes it the module's crlfAndFacts and runs it on the files it reads.
 */
#ifndef IMAPMIG_CRLF_H
#define IMAPMIG_CRLF_H

#include <Python.h>

#if defined(__GNUC__)
#define INLINE inline __attribute__((always_inline))
#else
#define INLINE inline
#endif

/* The facts (imapmig.mail.octets names them). */
#define FACT_NUL 1
#define FACT_EIGHT_BIT 2
#define FACT_BARE_CR 4
#define FACT_BARE_LF 8
#define FACT_ENDS_CR 16

/* Looks at the processor (once, when the module is imported); returns
 * whether the conversion takes its AVX2 steps. */
int crlfInit(void);

/*
 * p[0..n) converted, the octet before p[0] a CR when afterCR; its facts in
 * *facts.  When no LF needs a CR the result is data itself (uncopied) if
 * data is given, else a new bytes object holding p[0..n).  wide: the AVX2
 * steps where the processor has them.
 */
PyObject *convertOctets(PyObject *data, const unsigned char *p, Py_ssize_t n, int afterCR,
                        int last, int wide, unsigned int *facts);

#endif
