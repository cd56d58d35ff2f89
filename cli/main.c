/*
 * main.c - option parsing, the subcommand table, and the process-level
 * contract: exit codes (error.h), the writer lock taken for the commands
 * that need it, signal handling (SIGINT finishes the current atomic unit).
 */
#include "cli.h"
#include "compat.h"
#include "error.h"
#include "event.h"
#include "manifest.h"
#include "place.h"
#include "state.h"
#include "util.h"

#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct cmd commands[] = {
    {"validate", cmd_validate, CMD_MANIFEST, "validate MANIFEST...   check a manifest (no I/O)"},
    {"plan", cmd_plan, CMD_MANIFEST | CMD_STATE, "plan MANIFEST          show what apply would do"},
    {"apply", cmd_apply, CMD_MANIFEST | CMD_STATE | CMD_LOCK,
     "apply MANIFEST         make the machine match the manifest"},
    {"status", cmd_status, CMD_STATE, "status                 stacks, generations, drift"},
    {"verify", cmd_verify, CMD_STATE, "verify [STACK] [--deep] check what was placed"},
    {"destroy", cmd_destroy, CMD_STATE | CMD_LOCK, "destroy STACK          remove a stack"},
    {"rollback", cmd_rollback, CMD_STATE | CMD_LOCK,
     "rollback STACK [--generation N]  re-apply an earlier generation"},
    {"show", cmd_show, CMD_STATE, "show STACK             files and resources of a stack"},
    {"bench", cmd_bench, CMD_STATE, "bench [STACK] [--history]  GPU conv benchmark"},
    {"doctor", cmd_doctor, CMD_STATE, "doctor [MANIFEST]      diagnose common problems"},
    {"lock", cmd_lock, CMD_MANIFEST, "lock MANIFEST [-o OUT] resolve pins into a full lockfile"},
    {"mirror", cmd_mirror, CMD_STATE,
     "mirror build DIR MANIFEST... [--key K]  copy artifacts for offline use"},
    {"sign", cmd_sign, CMD_MANIFEST, "sign --key KEY MANIFEST...  write MANIFEST.minisig"},
    {"keygen", cmd_keygen, 0, "keygen --key KEY       write a minisign key pair KEY, KEY.pub"},
};

static void usage(FILE *f)
{
	fprintf(f, "usage: tfprov [options] COMMAND [args]\n\ncommands:\n");
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
		fprintf(f, "  %s\n", commands[i].usage);
	fprintf(
	    f,
	    "\noptions:\n"
	    "  --root DIR           put every path and the state under DIR\n"
	    "  --state-dir DIR      state database directory (default ROOT/var/lib/tfprov)\n"
	    "  --cache-dir DIR      download cache (default ROOT/var/cache/tfprov)\n"
	    "  --json               one JSON event per line on stdout\n"
	    "  --no-color, -q, -v   output control\n"
	    "  -y, --yes, --auto-approve  do not ask before applying\n"
	    "  --offline            never touch the network\n"
	    "  --mirror URL|DIR     try this source before the origin (repeatable)\n"
	    "  --jobs N             parallel downloads (default 4)\n"
	    "  --ca-bundle FILE     CA certificates for HTTPS\n"
	    "  --lock-timeout SEC   wait this long for another run (default 0)\n"
	    "  --no-gpu             allow provisioning without a GPU (checks reported as skipped)\n"
	    "  --allow-local-urls   fetch file:// and plain-path artifact URLs (--mirror DIR needs "
	    "no flag)\n"
	    "  --detailed-exitcode  plan: exit 2 when there are changes\n"
	    "  --trusted-key FILE   trust this minisign public key (repeatable)\n"
	    "  --require-signature  refuse a manifest without a trusted signature\n"
	    "\nexit codes: 0 ok, 1 error, 2 changes pending, 3 manifest invalid, 4 locked,\n"
	    "  5 integrity failure, 6 precondition failed, 7 reboot required,\n"
	    "  8 verify/benchmark failed, 64 usage, 130 interrupted\n");
}

static void on_signal(int sig)
{
	(void)sig;
	tf_interrupted = 1;
}

static char *absolute(const char *p)
{
	if (p[0] == '/')
		return xstrdup(p);
	char cwd[4096];
	if (getcwd(cwd, sizeof(cwd)) == NULL)
		return xstrdup(p);
	return path_join(cwd, p);
}

enum {
	OPT_ROOT = 256,
	OPT_STATE_DIR,
	OPT_CACHE_DIR,
	OPT_JSON,
	OPT_NO_COLOR,
	OPT_OFFLINE,
	OPT_MIRROR,
	OPT_JOBS,
	OPT_CA,
	OPT_LOCK_TIMEOUT,
	OPT_DETAILED,
	OPT_DEEP,
	OPT_HISTORY,
	OPT_NO_GPU,
	OPT_GENERATION,
	OPT_KEY,
	OPT_TRUSTED_KEY,
	OPT_REQUIRE_SIG,
	OPT_ALLOW_LOCAL,
};

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"root", required_argument, NULL, OPT_ROOT},
	    {"state-dir", required_argument, NULL, OPT_STATE_DIR},
	    {"cache-dir", required_argument, NULL, OPT_CACHE_DIR},
	    {"json", no_argument, NULL, OPT_JSON},
	    {"no-color", no_argument, NULL, OPT_NO_COLOR},
	    {"quiet", no_argument, NULL, 'q'},
	    {"verbose", no_argument, NULL, 'v'},
	    {"yes", no_argument, NULL, 'y'},
	    {"auto-approve", no_argument, NULL, 'y'},
	    {"offline", no_argument, NULL, OPT_OFFLINE},
	    {"mirror", required_argument, NULL, OPT_MIRROR},
	    {"jobs", required_argument, NULL, OPT_JOBS},
	    {"ca-bundle", required_argument, NULL, OPT_CA},
	    {"lock-timeout", required_argument, NULL, OPT_LOCK_TIMEOUT},
	    {"detailed-exitcode", no_argument, NULL, OPT_DETAILED},
	    {"deep", no_argument, NULL, OPT_DEEP},
	    {"history", no_argument, NULL, OPT_HISTORY},
	    {"no-gpu", no_argument, NULL, OPT_NO_GPU},
	    {"generation", required_argument, NULL, OPT_GENERATION},
	    {"allow-local-urls", no_argument, NULL, OPT_ALLOW_LOCAL},
	    {"output", required_argument, NULL, 'o'},
	    {"key", required_argument, NULL, OPT_KEY},
	    {"trusted-key", required_argument, NULL, OPT_TRUSTED_KEY},
	    {"require-signature", no_argument, NULL, OPT_REQUIRE_SIG},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct ctx c;
	struct opts o;
	int rc = 0, ex = 0;
	const char *root = "/", *state_dir = NULL, *cache_dir = NULL;
	memset(&c, 0, sizeof(c));
	memset(&o, 0, sizeof(o));
	ev_set_handler(render_event, NULL);
	c.rootfd = -1;
	c.jobs = 4;
	if (isatty(STDOUT_FILENO))
		c.flags |= CTX_TTY | CTX_COLOR;
	if (getenv("NO_COLOR") && getenv("NO_COLOR")[0])
		c.flags &= ~CTX_COLOR;

	int ch;
	while ((ch = getopt_long(argc, argv, "qvyho:", longopts, NULL)) != -1) {
		char *end;
		switch (ch) {
		case OPT_ROOT:
			root = optarg;
			break;
		case OPT_STATE_DIR:
			state_dir = optarg;
			break;
		case OPT_CACHE_DIR:
			cache_dir = optarg;
			break;
		case OPT_JSON:
			c.flags |= CTX_JSON;
			c.flags &= ~CTX_COLOR;
			break;
		case OPT_NO_COLOR:
			c.flags &= ~CTX_COLOR;
			break;
		case 'q':
			c.flags |= CTX_QUIET;
			break;
		case 'v':
			c.flags |= CTX_VERBOSE;
			break;
		case 'y':
			c.flags |= CTX_YES;
			break;
		case OPT_OFFLINE:
			c.flags |= CTX_OFFLINE;
			break;
		case OPT_MIRROR:
			strvec_push(&c.mirrors, optarg);
			break;
		case OPT_JOBS:
			c.jobs = (int)strtol(optarg, &end, 10);
			if (*end || c.jobs < 1 || c.jobs > 64) {
				fprintf(stderr, "tfprov: --jobs wants a number from 1 to 64\n");
				ex = TF_EXIT_USAGE;
				goto out;
			}
			break;
		case OPT_CA:
			c.ca_bundle = xstrdup(optarg);
			break;
		case OPT_LOCK_TIMEOUT:
			c.lock_timeout = strtod(optarg, &end);
			if (*end || c.lock_timeout < 0) {
				fprintf(stderr, "tfprov: --lock-timeout wants seconds\n");
				ex = TF_EXIT_USAGE;
				goto out;
			}
			break;
		case OPT_DETAILED:
			o.detailed_exitcode = 1;
			break;
		case OPT_DEEP:
			o.deep = 1;
			break;
		case OPT_HISTORY:
			o.history = 1;
			break;
		case OPT_NO_GPU:
			c.flags |= CTX_NO_GPU;
			break;
		case OPT_ALLOW_LOCAL:
			c.flags |= CTX_ALLOW_LOCAL;
			break;
		case OPT_GENERATION:
			o.generation = strtol(optarg, &end, 10);
			if (*end || o.generation < 1) {
				fprintf(stderr, "tfprov: --generation wants a generation number\n");
				ex = TF_EXIT_USAGE;
				goto out;
			}
			break;
		case 'o':
			o.out = optarg;
			break;
		case OPT_KEY:
			o.key = optarg;
			break;
		case OPT_TRUSTED_KEY:
			strvec_push(&c.trusted_keys, optarg);
			break;
		case OPT_REQUIRE_SIG:
			c.flags |= CTX_REQUIRE_SIG;
			break;
		case 'h':
			usage(stdout);
			goto out;
		default:
			usage(stderr);
			ex = TF_EXIT_USAGE;
			goto out;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		ex = TF_EXIT_USAGE;
		goto out;
	}
	const struct cmd *cmd = NULL;
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
		if (strcmp(argv[optind], commands[i].name) == 0)
			cmd = &commands[i];
	if (cmd == NULL) {
		fprintf(stderr, "tfprov: unknown command '%s'\n", argv[optind]);
		usage(stderr);
		ex = TF_EXIT_USAGE;
		goto out;
	}
	for (int i = optind + 1; i < argc; i++)
		strvec_push(&o.args, argv[i]);
	if ((cmd->flags & CMD_MANIFEST) && o.args.n == 0) {
		fprintf(stderr, "tfprov %s: a manifest is required\nusage: tfprov %s\n", cmd->name,
		        cmd->usage);
		ex = TF_EXIT_USAGE;
		goto out;
	}

	/* The root: an existing directory, used through one descriptor. */
	c.root = absolute(root);
	if (strlen(c.root) > 1 && c.root[strlen(c.root) - 1] == '/')
		c.root[strlen(c.root) - 1] = '\0';
	struct stat st;
	if (stat(c.root, &st) != 0 || !S_ISDIR(st.st_mode)) {
		if (mkdirs_at(AT_FDCWD, c.root, 0755) != 0) {
			fprintf(stderr, "tfprov: --root %s is not a directory\n", c.root);
			ex = TF_EXIT_USAGE;
			goto out;
		}
	}
	/* The real path: host paths under the root are built on it (inroot.c). */
	char *real = realpath(c.root, NULL);
	if (real) {
		free(c.root);
		c.root = real;
	}
	c.rootfd = open(c.root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	c.state_dir = state_dir ? absolute(state_dir) : ctx_host_dir(&c, "/var/lib/tfprov");
	c.cache_dir = cache_dir ? absolute(cache_dir) : ctx_host_dir(&c, "/var/cache/tfprov");

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	/*
	 * Commands that write finish their current atomic unit on SIGINT/SIGTERM;
	 * read-only ones keep the default action so they can always be stopped.
	 */
	if (cmd->flags & CMD_LOCK) {
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
	}

	if (cmd->flags & CMD_STATE) {
		/*
		 * A writer on a root with no state yet defers creating it until its
		 * preconditions pass (place_open_state from plan_apply), so a run
		 * that stops with exit 6 leaves a fresh root exactly as it was.
		 */
		char *err = NULL;
		rc = state_open(c.state_dir, 0, &c.st, &err);
		if (rc < 0) {
			ev_log(&c, EV_ERROR, "%s (%s)", err ? err : "cannot open the state",
			       c.state_dir);
			free(err);
			goto done;
		}
		rc = 0; /* 1: no state yet, which readers treat as empty */
		if ((cmd->flags & CMD_LOCK) && c.st) {
			state_close(c.st);
			c.st = NULL;
			rc = place_open_state(&c);
			if (rc != 0)
				goto done;
		}
	}
	rc = cmd->fn(&c, &o);
done:
	if (tf_interrupted && rc == 0)
		rc = TF_EINTR;
	ex = rc > 0 ? rc : tf_exit_code(rc);
	if (c.flags & CTX_JSON) {
		struct event e = {.kind = EV_RESULT,
		                  .level = ex ? EV_ERROR : EV_INFO,
		                  .exit_code = ex,
		                  .changed = c.changed,
		                  .failed = ex != 0 && ex != 2};
		ev_emit(&c, &e);
	}
out:
	state_close(c.st);
	if (c.rootfd >= 0)
		close(c.rootfd);
	free(c.root);
	free(c.state_dir);
	free(c.cache_dir);
	free(c.ca_bundle);
	strvec_release(&c.mirrors);
	strvec_release(&c.trusted_keys);
	strvec_release(&o.args);
	return ex;
}
