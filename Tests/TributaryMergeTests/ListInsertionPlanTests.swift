import Testing
import TributaryMerge
import TributaryModel

/// A list update places its new elements with one ``ListInsertionPlan`` instead of reading the list again for each
/// one. Checked against the way it placed them before, one ``ListState/anchor(forInsertionAt:)`` per element on the
/// list as each insert left it, on random lists: trees with concurrent siblings, erased elements, moved elements.
@Suite struct ListInsertionPlanTests {
    struct Builder {
        var list = ListState()
        var generator: SplitMix64
        var time: UInt64 = 1
        var sequence: UInt64 = 1

        init(seed: UInt64) { generator = SplitMix64(seed: seed) }

        mutating func random(_ bound: Int) -> Int { Int(generator.next() % UInt64(bound)) }

        /// A stamp from one of three replicas, at a time that may repeat: siblings then order by replica, then id.
        mutating func stamp() -> Stamp {
            time += UInt64(random(2))
            return Stamp(time: HybridTime(rawValue: time), replica: ReplicaID(rawValue: UInt64(1 + random(3))))
        }

        mutating func freshID() -> ElementID {
            sequence += 1
            return ElementID(origin: ReplicaID(rawValue: UInt64(1 + random(3))), sequence: sequence, index: 0)
        }

        /// Where a concurrent writer might have put a slot: any slot's left or right side, or the root's.
        mutating func randomAnchor() -> ListAnchor {
            let parents = list.slots.keys.sorted()
            let parent = parents.isEmpty || random(6) == 0 ? nil : parents[random(parents.count)]
            return ListAnchor(parent: parent, side: random(2) == 0 ? .left : .right)
        }

        mutating func insert(at anchor: ListAnchor, id: ElementID, stamp: Stamp) {
            list.slots[id] = Slot(id: id, parent: anchor.parent, side: anchor.side, stamp: stamp)
            list.elements[id] = ListElement(
                id: id, value: .scalar(.int(Int64(id.sequence))), valueStamp: stamp, position: id, positionStamp: stamp)
        }

        /// A list made by `steps` random inserts (local ones by index, and concurrent ones anywhere in the tree),
        /// erases and moves.
        mutating func build(steps: Int) {
            for _ in 0..<steps {
                let live = list.orderedElements()
                switch random(10) {
                case 0..<4:
                    insert(at: list.anchor(forInsertionAt: random(live.count + 1)), id: freshID(), stamp: stamp())
                case 4..<7:
                    insert(at: randomAnchor(), id: freshID(), stamp: stamp())
                case 7, 8:
                    guard !live.isEmpty else { continue }
                    let id = live[random(live.count)].id
                    list.elements[id] = nil
                default:
                    guard !live.isEmpty else { continue }
                    var element = live[random(live.count)]
                    let slot = freshID()
                    let stamp = stamp()
                    list.slots[slot] = Slot(id: slot, parent: randomAnchor().parent, side: .right, stamp: stamp)
                    element.position = slot
                    element.positionStamp = stamp
                    list.elements[element.id] = element
                }
            }
        }
    }

    /// An update: some of the live elements kept, in order, with runs of new elements before, between and after them.
    /// Returns the new list as element ids (`nil` for a new element).
    static func update(keeping live: [ListElement], _ builder: inout Builder) -> [ElementID?] {
        var result: [ElementID?] = []
        func run(_ builder: inout Builder) {
            let length = builder.random(3) == 0 ? builder.random(5) : 0
            result.append(contentsOf: repeatElement(nil, count: length))
        }
        run(&builder)
        for element in live where builder.random(3) != 0 {
            result.append(element.id)
            run(&builder)
        }
        return result
    }

    @Test(
        "the plan gives each insert the anchor the list gave it, and the elements land in the order written",
        arguments: 0..<40)
    func planMatchesReadingTheListForEachInsert(seed: Int) {
        var builder = Builder(seed: UInt64(seed) &* 0x9E37_79B9)
        builder.build(steps: 5 + seed * 3)
        let live = builder.list.orderedElements()
        let update = Self.update(keeping: live, &builder)
        // The update first erases the elements it does not keep, as the transaction's list update does.
        let kept = Set(update.compactMap { $0 })
        for element in live where !kept.contains(element.id) {
            builder.list.elements[element.id] = nil
        }
        let list = builder.list
        let writer = Dot(origin: ReplicaID(rawValue: 9), sequence: 1)
        let stamp = Stamp(time: HybridTime(rawValue: builder.time + 1), replica: ReplicaID(rawValue: 9))
        let position = Dictionary(uniqueKeysWithValues: live.map { ($0.id, $0.position) })

        // Before: read the list as each insert left it; the element before goes by its element id.
        var before = builder
        var planned = builder
        var placedElement: [ElementID?] = update
        var expectedAnchors: [ListAnchor] = []
        for index in update.indices where update[index] == nil {
            var at = 0
            if index > 0, let left = placedElement[index - 1] {
                at = (before.list.orderedElements().firstIndex { $0.id == left } ?? -1) + 1
            }
            let anchor = before.list.anchor(forInsertionAt: at)
            expectedAnchors.append(anchor)
            let id = ElementID(dot: writer, instruction: index)
            before.insert(at: anchor, id: id, stamp: stamp)
            placedElement[index] = id
        }

        // Now: one plan; the element before goes by its slot.
        let plan = ListInsertionPlan(list)
        var placedSlot: [ElementID?] = update.map { $0.flatMap { position[$0] } }
        var anchors: [ListAnchor] = []
        for index in update.indices where update[index] == nil {
            let anchor = plan.anchor(after: index > 0 ? placedSlot[index - 1] : nil)
            anchors.append(anchor)
            let id = ElementID(dot: writer, instruction: index)
            planned.insert(at: anchor, id: id, stamp: stamp)
            placedSlot[index] = id
        }

        #expect(anchors == expectedAnchors)
        #expect(planned.list == before.list)
        // The elements read back in the order the update wrote them.
        #expect(planned.list.orderedElements().map(\.id) == placedElement.map { $0! })
    }

    @Test("filling an empty list and a list emptied by erases: every element in order, each after the one before")
    func fillsInOrder() {
        for erased in [0, 5] {
            var builder = Builder(seed: 7)
            builder.build(steps: 0)
            for _ in 0..<erased {
                builder.insert(at: builder.randomAnchor(), id: builder.freshID(), stamp: builder.stamp())
            }
            builder.list.elements.removeAll()
            let plan = ListInsertionPlan(builder.list)
            var left: ElementID? = nil
            var ids: [ElementID] = []
            let writer = Dot(origin: ReplicaID(rawValue: 9), sequence: 1)
            for index in 0..<1_000 {
                let anchor = plan.anchor(after: left)
                if index > 0 { #expect(anchor == ListAnchor(parent: left, side: .right)) }
                let id = ElementID(dot: writer, instruction: index)
                builder.insert(at: anchor, id: id, stamp: Stamp(time: HybridTime(rawValue: 99), replica: writer.origin))
                ids.append(id)
                left = id
            }
            #expect(builder.list.orderedElements().map(\.id) == ids)
        }
    }
}
