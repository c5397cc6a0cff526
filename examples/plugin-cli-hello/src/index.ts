/** The plugin's commands are found by oclif through package.json's `oclif.commands`; nothing else is exported. */
export { default as Hello } from './commands/hello.js';
