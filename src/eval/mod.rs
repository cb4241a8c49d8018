//! Sample quality: distances between the features a classifier trained on the data set gives
//! generated images and real ones (the Fréchet distance and KID).

pub mod frechet;
pub mod kid;
