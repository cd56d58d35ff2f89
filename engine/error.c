/* error.c - messages and exit codes for the error vocabulary in error.h. */
#include "error.h"

volatile int tf_interrupted;

#define TF_ERR_MSG(name, exit, msg) msg,
static const char *const messages[] = {TF_ERRORS(TF_ERR_MSG)};
#undef TF_ERR_MSG
#define TF_ERR_EXIT(name, exit, msg) exit,
static const int exits[] = {TF_ERRORS(TF_ERR_EXIT)};
#undef TF_ERR_EXIT

const char *tf_strerror(int err)
{
	int i = -err;
	if (i < 0 || i >= TF_ERR__COUNT)
		return "unknown error";
	return messages[i];
}

int tf_exit_code(int err)
{
	int i = -err;
	if (i < 0 || i >= TF_ERR__COUNT)
		return TF_EXIT_ERROR;
	return exits[i];
}
