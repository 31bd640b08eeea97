/*-------------------------------------------------------------------------
 *
 * installation.h
 *		The extension as installed in the worker's database: the campaign
 *		cache loaded, and its SQL's version checked.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_INSTALLATION_H
#define SECKILL_INSTALLATION_H

#include "seckill.h"

extern bool sk_installation_current(void);
extern bool sk_installation_loaded(void);

#endif							/* SECKILL_INSTALLATION_H */
