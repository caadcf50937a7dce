#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <microhttpd.h>

/* Swift cannot call C variadic functions: these pass libmicrohttpd's variadic arguments for it. */

/* MHD_start_daemon with every option in one MHD_OPTION_END-terminated array. `port` is the port of
   the MHD_OPTION_SOCK_ADDR address (libmicrohttpd binds that address, and names `port` in its
   messages). */
static inline struct MHD_Daemon *ledger_mhd_start_daemon(unsigned int flags, uint16_t port, MHD_AcceptPolicyCallback accept,
                                                         void *acceptContext, MHD_AccessHandlerCallback handler, void *context,
                                                         const struct MHD_OptionItem *options) {
    return MHD_start_daemon(flags, port, accept, acceptContext, handler, context, MHD_OPTION_ARRAY, options, MHD_OPTION_END);
}

/* The port the daemon is bound to (0 when unknown). */
static inline uint16_t ledger_mhd_bound_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}

/* The socket of a connection (-1 when unknown). */
static inline int ledger_mhd_connection_socket(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info == NULL ? -1 : info->connect_fd;
}

/* Milliseconds since the TCP socket last received data (TCP_INFO), or -1 when unknown. */
static inline int64_t ledger_tcp_milliseconds_since_data(int socket) {
    struct tcp_info info;
    socklen_t length = sizeof info;
    if (getsockopt(socket, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) return -1;
    if (length < offsetof(struct tcp_info, tcpi_last_data_recv) + sizeof info.tcpi_last_data_recv) return -1;
    return info.tcpi_last_data_recv;
}
