// Helpers compiled into every harness in Tests/Fuzz (see fuzz.sh).

/// The fuzzer's input as bytes.
func fuzzInput(_ start: UnsafeRawPointer?, _ count: Int) -> [UInt8] {
    guard let start, count > 0 else { return [] }
    return [UInt8](UnsafeRawBufferPointer(start: start, count: count))
}

/// Stops the run when a property the harness checks does not hold: libFuzzer reports it as a crash and
/// saves the input that broke it.
func expect(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition { fatalError("fuzz property violated: \(message())") }
}

/// Splits `bytes` at the first `separator` byte: one input can then carry two values (a key and a value,
/// a certificate and a signature). Without a separator the second part is empty.
func splitOnce(_ bytes: [UInt8], separator: UInt8) -> ([UInt8], [UInt8]) {
    guard let index = bytes.firstIndex(of: separator) else { return (bytes, []) }
    return (Array(bytes[..<index]), Array(bytes[(index + 1)...]))
}
