import { mount } from 'svelte';
import App from './App.svelte';
import { setTransport } from './lib/app.svelte';
import { isTauri } from '@tauri-apps/api/core';
import { HttpTransport } from './lib/http';
import { TauriTransport } from './lib/tauri';
import './app.css';
import 'highlight.js/styles/github.css';

// In the desktop app, Tauri's commands; in a browser, the `catena serve` that served the page.
const desktop = isTauri() ? new TauriTransport() : null;
setTransport(desktop ?? new HttpTransport());

const target = document.getElementById('app');
if (target) {
  mount(App, { target });
  desktop?.windowReady().catch(() => {
    // Only a measurement: the app works without it.
  });
}
