#include <stdint.h>
#include <sys/types.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <microhttpd.h>

/* Swift cannot call C variadic functions: these pass libmicrohttpd's variadic arguments for it. */

/* MHD_start_daemon with every option in one MHD_OPTION_END-terminated array. */
static inline struct MHD_Daemon *ledger_mhd_start_daemon(unsigned int flags, MHD_AccessHandlerCallback handler, void *context,
                                                         const struct MHD_OptionItem *options) {
    return MHD_start_daemon(flags, 0, NULL, NULL, handler, context, MHD_OPTION_ARRAY, options, MHD_OPTION_END);
}

/* The port the daemon is bound to (0 when unknown). */
static inline uint16_t ledger_mhd_bound_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}
