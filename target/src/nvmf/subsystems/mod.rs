//! The NVM subsystems as hosts see them: subsystems with their hosts and namespaces
//! ([`subsystem`]), the controllers hosts create in them ([`controller`]), the namespace
//! table that gives every open namespace its slot ([`ns_table`]), and each port's ANA
//! states ([`ana`]). Transport-neutral, and no command runs here: the command sets in
//! [`super::commands`] read and change this model.

pub mod ana;
pub mod controller;
pub mod ns_table;
pub mod subsystem;
