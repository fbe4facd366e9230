/*
 * cpu_backend.h - the CPU backend's primitives, as backend_cpu.c's table
 * names them: one block per family, each implemented in its own file
 * under src/backend/cpu/.
 */
#ifndef AMPC_CPU_BACKEND_H
#define AMPC_CPU_BACKEND_H

#include "backend/backend.h"

/* ==== section pointwise ==== */
/* ==== end section pointwise ==== */



/* ==== section linalg ==== */
/* ==== end section linalg ==== */



/* ==== section nn ==== */
/* ==== end section nn ==== */



/* ==== section conv ==== */
/* ==== end section conv ==== */



/* ==== section amp ==== */
/* ==== end section amp ==== */



/* ==== section optim ==== */
/* ==== end section optim ==== */

#endif
