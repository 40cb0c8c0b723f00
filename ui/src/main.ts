import { mount } from 'svelte';
import App from './App.svelte';
import { setTransport } from './lib/app.svelte';
import { HttpTransport } from './lib/http';
import './app.css';
import 'highlight.js/styles/github.css';

// The browser build talks to the `catena serve` that served it.
setTransport(new HttpTransport());

const target = document.getElementById('app');
if (target) mount(App, { target });
