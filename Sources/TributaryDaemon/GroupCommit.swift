/// Takes the next group off a queue of waiting work for one commit: as many entries from the front as fit in
/// `maximumBytes` (at least one, however large), removed from `queue`.
func takeGroup<Entry>(from queue: inout [Entry], maximumBytes: Int, bytes: (Entry) -> Int) -> [Entry] {
    var size = 0
    var taken = 0
    while taken < queue.count && (taken == 0 || size + bytes(queue[taken]) <= maximumBytes) {
        size += bytes(queue[taken])
        taken += 1
    }
    let group = Array(queue.prefix(taken))
    queue.removeFirst(taken)
    return group
}
