// libFuzzer harness for the check every open makes of `data.mdb` before LMDB maps it (a damaged or
// truncated file comes from outside: a bad copy, a full disk, a restore): any bytes are accepted or
// refused with the store's "corrupt" error naming the file, never a trap. The check reads the meta pages
// and, when the file ends before the newest one's last page, walks LMDB's free-page database to see
// whether every page past the end is free. Built and run by `make fuzz` (Tests/Fuzz/fuzz.sh).
@testable import LedgerStore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzLMDBFileCheck(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let file = fuzzInput(start, count)
    let read: (Int, Int) -> [UInt8]? = { offset, length in
        offset >= 0 && length >= 0 && offset <= file.count - length ? Array(file[offset..<offset + length]) : nil
    }
    do {
        try LMDBFileCheck.check("fuzz/data.mdb", size: file.count, read: read)
    } catch let error as LedgerStoreError {
        guard case .corrupt(let message) = error else { return fail("not a corrupt-store error: \(error)") }
        expect(message.contains("fuzz/data.mdb"), "the refusal does not name the file: \(message)")
    } catch {
        return fail("an unexpected error: \(error)")
    }
    return 0
}

private func fail(_ message: String) -> CInt {
    expect(false, message)
    return 0
}
