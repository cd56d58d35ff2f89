/* manifest.c - placeholder; the libyaml parser lands next. */
#include "manifest.h"
