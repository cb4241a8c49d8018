//! The docs hold to the code: the commands they show parse and run, the errors page is what
//! the program prints, and every link leads somewhere.

mod commands;
mod errors;
mod links;
mod markdown;
