//! Newtypes for the engine's units, so that pages, slots and bytes never mix.

/// One cached block address space (an NBD export, a file).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VolumeId(pub u16);

/// Index of a page within a volume (byte offset / page size).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PageIndex(pub u64);

/// Index of a page-sized place on the cache device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlotIndex(pub u32);

/// An epoch of writes the backing moves through whole: journaled
/// write-back's transaction, numbered from 1 in commit order over the
/// engine's life (the low 32 bits are kept per slot; live epochs span
/// fewer than 2^32).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EpochId(pub u64);

/// (volume, page) packed into one u64: volume in the top 16 bits, page in the
/// low 48 (2^48 pages of 512 B is 128 PiB per volume). Sorting keys sorts by
/// volume, then address, which is the order CSCAN and WOW sweep in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PageKey(pub u64);

pub const PAGE_INDEX_BITS: u32 = 48;
pub const PAGE_INDEX_MAX: u64 = (1 << PAGE_INDEX_BITS) - 1;

impl PageKey {
    pub fn new(volume: VolumeId, page: PageIndex) -> PageKey {
        assert!(page.0 <= PAGE_INDEX_MAX, "page index beyond 48 bits");
        PageKey(((volume.0 as u64) << PAGE_INDEX_BITS) | page.0)
    }
    pub fn volume(self) -> VolumeId {
        VolumeId((self.0 >> PAGE_INDEX_BITS) as u16)
    }
    pub fn page(self) -> PageIndex {
        PageIndex(self.0 & PAGE_INDEX_MAX)
    }
}

/// A write group's sort key: volume in the high 16 bits, the group's number
/// within the volume in the low 48, so that ascending keys are ascending
/// addresses (the order CSCAN and WOW sweep in). A group's key is the page
/// key of its number, the same packing as `PageKey`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKey(pub u64);

impl GroupKey {
    pub fn new(volume: VolumeId, group: u64) -> GroupKey {
        GroupKey(PageKey::new(volume, PageIndex(group)).0)
    }
    pub fn volume(self) -> VolumeId {
        PageKey(self.0).volume()
    }
    /// The group's number within its volume.
    pub fn group(self) -> u64 {
        PageKey(self.0).page().0
    }
}

/// Names one engine I/O command; the driver hands it back on completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IoId(pub u64);

/// Names one client request; chosen by the front end, unique while in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);
