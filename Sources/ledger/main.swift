import Foundation
import LedgerCrypto
import LedgerStore

Console.requireStandardDescriptors()
let console = Console()
var argv = Array(CommandLine.arguments.dropFirst())
DamagedStoreStop.install(arguments: argv)
if let mapSize = ProcessInfo.processInfo.environment[MapSize.environmentVariable], MapSize.parse(mapSize) == nil {
    console.err(
        "error: \(MapSize.environmentVariable)=\(mapSize) is not a map size: a number of bytes, or of KiB, MiB, GiB or TiB "
            + "(1MiB to 1TiB), e.g. 1GiB")
    exit(ExitCode.usage.rawValue)
}
LedgerStore.writerWaitNotice = {
    Console().err(
        "ledger: waiting for another process's write to this store to finish (LMDB lets one process write at a time; a stopped "
            + "writer, e.g. SIGSTOP or a debugger, holds the others until it continues or ends)")
}
guard let name = argv.first, !["--help", "-h", "help"].contains(name) else {
    console.out(overview())
    exit(argv.isEmpty ? ExitCode.usage.rawValue : 0)
}
argv.removeFirst()
guard let command = commands.first(where: { $0.name == name }) else {
    console.err("error: unknown command \(name)\n\n" + overview())
    exit(ExitCode.usage.rawValue)
}
if argv.contains("--help") || argv.contains("-h") {
    console.out(command.usage)
    exit(0)
}
do {
    let arguments = try Arguments(
        argv, options: command.options.union(["store", "keys", "read-store"]), flags: command.flags, repeatable: command.repeatable,
        positionals: command.positionals)
    exit(try command.run(arguments, console: console).rawValue)
} catch let error as CLIError {
    console.err("error: \(error.message)")
    if error.code == .usage { console.err("Run `ledger \(name) --help` for usage.") }
    exit(error.code.rawValue)
} catch let error as LedgerStoreError {
    console.err("error: \(error)")
    exit(ExitCode.storeError.rawValue)
} catch let error as CryptoError {
    console.err("error: libcrypto failed: \(error) (check the OpenSSL installation and OPENSSL_CONF)")
    exit(ExitCode.storeError.rawValue)
} catch {
    console.err("error: \(error)")
    exit(ExitCode.storeError.rawValue)
}
