//! Write-around: writes go to the backing only and cached copies of their
//! pages are dropped, so only reads fill the cache. A write over a page whose
//! cached version a bypass would lose or race (dirty, in flight, or an older
//! version being destaged) goes through the cache instead, as write-through.

use super::{WritePolicy, WriteRoute};

pub struct WriteAround;

impl WritePolicy for WriteAround {
    fn name(&self) -> &'static str {
        "write-around"
    }
    fn route(&self, bypass_would_lose: &mut dyn FnMut() -> bool) -> WriteRoute {
        if bypass_would_lose() {
            WriteRoute::CacheAndBacking
        } else {
            WriteRoute::Backing
        }
    }
    fn may_bypass(&self) -> bool {
        true
    }
}
