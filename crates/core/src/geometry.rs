//! Geometry: how byte ranges map to pages and write groups.
//!
//! A request of any offset and length is split into page pieces; a piece that
//! covers only part of a page is a *partial page*. The engine never holds a
//! partial page: a partial write builds a whole new page version from a base
//! (the cached version, the backing's page, or zeros) overlaid with the new
//! bytes (see `engine`). Write groups are aligned runs of `group_pages` pages
//! (a RAID strip or stripe) and are the unit of destage ordering.

use crate::types::{PageIndex, PAGE_INDEX_MAX};
use thiserror::Error;

pub const PAGE_SIZE_BYTES_MIN: u32 = 512;
pub const PAGE_SIZE_BYTES_MAX: u32 = 64 * 1024;
/// Bounded so that one group's dirty bitmap stays small (64 words).
pub const GROUP_PAGES_MAX: u32 = 4096;

const _: () = assert!(PAGE_SIZE_BYTES_MIN.is_power_of_two());
const _: () = assert!(PAGE_SIZE_BYTES_MAX.is_power_of_two());
const _: () = assert!(GROUP_PAGES_MAX.is_multiple_of(64));

#[derive(Debug, Error, PartialEq, Eq)]
pub enum GeometryError {
    #[error("page_size_bytes = {0}: must be a power of two between 512 and 65536")]
    PageSize(u64),
    #[error("group_size_bytes = {group}: must be a positive multiple of page_size_bytes = {page}")]
    GroupNotMultiple { group: u64, page: u64 },
    #[error("group_size_bytes = {group}: at most {max} pages per write group")]
    GroupTooLarge { group: u64, max: u32 },
}

/// Page and write-group sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    page_size_bytes: u32,
    page_shift: u32,
    group_pages: u32,
}

impl Geometry {
    pub fn new(page_size_bytes: u64, group_size_bytes: u64) -> Result<Geometry, GeometryError> {
        if !(PAGE_SIZE_BYTES_MIN as u64..=PAGE_SIZE_BYTES_MAX as u64).contains(&page_size_bytes)
            || !page_size_bytes.is_power_of_two()
        {
            return Err(GeometryError::PageSize(page_size_bytes));
        }
        if group_size_bytes == 0 || !group_size_bytes.is_multiple_of(page_size_bytes) {
            return Err(GeometryError::GroupNotMultiple {
                group: group_size_bytes,
                page: page_size_bytes,
            });
        }
        let group_pages = group_size_bytes / page_size_bytes;
        if group_pages > GROUP_PAGES_MAX as u64 {
            return Err(GeometryError::GroupTooLarge {
                group: group_size_bytes,
                max: GROUP_PAGES_MAX,
            });
        }
        Ok(Geometry {
            page_size_bytes: page_size_bytes as u32,
            page_shift: page_size_bytes.trailing_zeros(),
            group_pages: group_pages as u32,
        })
    }

    pub fn page_size_bytes(&self) -> u32 {
        self.page_size_bytes
    }
    pub fn group_pages(&self) -> u32 {
        self.group_pages
    }
    pub fn group_size_bytes(&self) -> u64 {
        (self.group_pages as u64) << self.page_shift
    }
    pub fn page_of(&self, offset_bytes: u64) -> PageIndex {
        PageIndex(offset_bytes >> self.page_shift)
    }
    pub fn page_offset_bytes(&self, page: PageIndex) -> u64 {
        page.0 << self.page_shift
    }
    /// Group number of a page, and the page's position inside the group.
    pub fn group_of(&self, page: PageIndex) -> (u64, u32) {
        let g = self.group_pages as u64;
        (page.0 / g, (page.0 % g) as u32)
    }
    pub fn first_page_of_group(&self, group: u64) -> PageIndex {
        PageIndex(group * self.group_pages as u64)
    }
    /// Pages a volume of `size_bytes` spans (the last may be partial).
    pub fn pages_in(&self, size_bytes: u64) -> u64 {
        size_bytes.div_ceil(self.page_size_bytes as u64)
    }
    /// Largest volume the page-key packing can address.
    pub fn volume_size_bytes_max(&self) -> u64 {
        (PAGE_INDEX_MAX >> 1) << self.page_shift
    }

    /// Split `[offset_bytes, offset_bytes + len_bytes)` into page pieces, in
    /// address order. The caller checks the range against the volume size.
    pub fn pieces(&self, offset_bytes: u64, len_bytes: u64) -> Pieces {
        Pieces {
            page_size_bytes: self.page_size_bytes as u64,
            page_shift: self.page_shift,
            start_bytes: offset_bytes,
            next_bytes: offset_bytes,
            end_bytes: offset_bytes + len_bytes,
        }
    }
}

/// The part of one page a request touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagePiece {
    pub page: PageIndex,
    /// Offset of the piece within the page.
    pub page_offset_bytes: u32,
    pub len_bytes: u32,
    /// Offset of the piece within the request's buffer.
    pub req_offset_bytes: u64,
}

impl PagePiece {
    pub fn is_whole_page(&self, page_size_bytes: u32) -> bool {
        self.page_offset_bytes == 0 && self.len_bytes == page_size_bytes
    }
}

/// Iterator over the page pieces of a byte range.
#[derive(Clone, Debug)]
pub struct Pieces {
    page_size_bytes: u64,
    page_shift: u32,
    start_bytes: u64,
    next_bytes: u64,
    end_bytes: u64,
}

impl Iterator for Pieces {
    type Item = PagePiece;
    fn next(&mut self) -> Option<PagePiece> {
        if self.next_bytes >= self.end_bytes {
            return None;
        }
        let page = self.next_bytes >> self.page_shift;
        let page_offset = self.next_bytes & (self.page_size_bytes - 1);
        let page_end = (page + 1) << self.page_shift;
        let piece_end = page_end.min(self.end_bytes);
        let piece = PagePiece {
            page: PageIndex(page),
            page_offset_bytes: page_offset as u32,
            len_bytes: (piece_end - self.next_bytes) as u32,
            req_offset_bytes: self.next_bytes - self.start_bytes,
        };
        self.next_bytes = piece_end;
        Some(piece)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_sizes() {
        assert_eq!(
            Geometry::new(1000, 4000),
            Err(GeometryError::PageSize(1000))
        );
        assert_eq!(Geometry::new(256, 4096), Err(GeometryError::PageSize(256)));
        assert_eq!(
            Geometry::new(131072, 131072),
            Err(GeometryError::PageSize(131072))
        );
        assert!(matches!(
            Geometry::new(4096, 6000),
            Err(GeometryError::GroupNotMultiple { .. })
        ));
        assert!(matches!(
            Geometry::new(512, 512 * 8192),
            Err(GeometryError::GroupTooLarge { .. })
        ));
    }

    #[test]
    fn splits_unaligned_range() {
        let g = Geometry::new(4096, 65536).unwrap();
        let p: Vec<_> = g.pieces(4000, 5000).collect();
        assert_eq!(p.len(), 3);
        assert_eq!(
            p[0],
            PagePiece {
                page: PageIndex(0),
                page_offset_bytes: 4000,
                len_bytes: 96,
                req_offset_bytes: 0
            }
        );
        assert_eq!(
            p[1],
            PagePiece {
                page: PageIndex(1),
                page_offset_bytes: 0,
                len_bytes: 4096,
                req_offset_bytes: 96
            }
        );
        assert_eq!(
            p[2],
            PagePiece {
                page: PageIndex(2),
                page_offset_bytes: 0,
                len_bytes: 808,
                req_offset_bytes: 4192
            }
        );
        assert_eq!(p.iter().map(|x| x.len_bytes as u64).sum::<u64>(), 5000);
        assert_eq!(g.pieces(8192, 0).count(), 0);
    }

    #[test]
    fn groups() {
        let g = Geometry::new(4096, 256 * 1024).unwrap();
        assert_eq!(g.group_pages(), 64);
        assert_eq!(g.group_of(PageIndex(130)), (2, 2));
        assert_eq!(g.first_page_of_group(2), PageIndex(128));
    }
}
