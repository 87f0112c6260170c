/**
 * The interstitial page a client without a clearance gets during an attack: a proof of work its
 * browser solves in about a second (SHA-256 of `challenge:counter` with a number of leading zero
 * bits), then sends to /.well-known/tps-challenge, which answers with the clearance cookie and a
 * redirect back to the page asked for.
 *
 * No third-party resource, no cookie of another site; the script and the style are inline and
 * allowed by their hashes in the page's Content-Security-Policy. WebCrypto's digest where the page
 * is a secure context, else (a plain-HTTP site, where `crypto.subtle` does not exist) the same hash
 * in plain JavaScript. Without JavaScript, the <noscript> text says what is needed.
 *
 * 503 rather than 403: the page says "come back in a moment" (crawlers keep the site indexed), and
 * `tps-mitigated: challenge` tells scripts what it is (Cloudflare's `cf-mitigated: challenge`).
 */
import { createHash } from 'node:crypto';

export const CHALLENGE_PATH = '/.well-known/tps-challenge';
export const CHALLENGE_STATUS = 503;

// The solver: reads its inputs from data attributes, so that the script is the same bytes on every
// page and its hash can sit in the Content-Security-Policy.
const SCRIPT = `(function(){
var el=document.getElementById('tps-challenge');
var c=el.getAttribute('data-challenge'),b=+el.getAttribute('data-bits'),r=el.getAttribute('data-return');
var st=document.getElementById('tps-status');
function lz(d){var n=0;for(var i=0;i<d.length;i++){if(d[i]===0){n+=8;continue}return n+Math.clz32(d[i])-24}return n}
function done(n){st.textContent='Done. Loading the page\\u2026';location.replace('${CHALLENGE_PATH}?c='+encodeURIComponent(c)+'&n='+n+'&r='+encodeURIComponent(r))}
var K=[],H0=[],p=2;while(K.length<64){var q=2,prime=true;for(;q*q<=p;q++){if(p%q===0){prime=false;break}}if(prime){if(H0.length<8)H0.push((Math.pow(p,1/2)%1)*4294967296|0);K.push((Math.pow(p,1/3)%1)*4294967296|0)}p++}
function sha(s){var l=s.length,nw=((l+8)>>6<<4)+16,m=new Array(nw),w=new Array(64),H=H0.slice(),i,j;for(i=0;i<nw;i++)m[i]=0;
for(i=0;i<l;i++)m[i>>2]|=(s.charCodeAt(i)&255)<<(24-(i%4)*8);m[l>>2]|=128<<(24-(l%4)*8);m[nw-1]=l*8;
for(i=0;i<nw;i+=16){var a=H[0],bb=H[1],cc=H[2],d=H[3],e=H[4],f=H[5],g=H[6],h=H[7];
for(j=0;j<64;j++){if(j<16)w[j]=m[i+j];else{var x=w[j-15],y=w[j-2];w[j]=((((x>>>7)|(x<<25))^((x>>>18)|(x<<14))^(x>>>3))+(((y>>>17)|(y<<15))^((y>>>19)|(y<<13))^(y>>>10))+w[j-7]+w[j-16])|0}
var t1=(h+(((e>>>6)|(e<<26))^((e>>>11)|(e<<21))^((e>>>25)|(e<<7)))+((e&f)^(~e&g))+K[j]+w[j])|0;
var t2=((((a>>>2)|(a<<30))^((a>>>13)|(a<<19))^((a>>>22)|(a<<10)))+((a&bb)^(a&cc)^(bb&cc)))|0;
h=g;g=f;f=e;e=(d+t1)|0;d=cc;cc=bb;bb=a;a=(t1+t2)|0}
H[0]=(H[0]+a)|0;H[1]=(H[1]+bb)|0;H[2]=(H[2]+cc)|0;H[3]=(H[3]+d)|0;H[4]=(H[4]+e)|0;H[5]=(H[5]+f)|0;H[6]=(H[6]+g)|0;H[7]=(H[7]+h)|0}
var out=new Uint8Array(32);for(i=0;i<8;i++){out[i*4]=H[i]>>>24;out[i*4+1]=(H[i]>>>16)&255;out[i*4+2]=(H[i]>>>8)&255;out[i*4+3]=H[i]&255}return out}
var n=0;
function plain(){for(var k=0;k<20000;k++,n++){if(lz(sha(c+':'+n))>=b)return done(n)}setTimeout(plain,0)}
var subtle=window.crypto&&window.crypto.subtle;
if(!subtle||!window.TextEncoder){plain();return}
var enc=new TextEncoder(),B=128;
function batch(){var ps=[];for(var k=0;k<B;k++)ps.push(subtle.digest('SHA-256',enc.encode(c+':'+(n+k))));
Promise.all(ps).then(function(ds){for(var k=0;k<ds.length;k++){if(lz(new Uint8Array(ds[k]))>=b)return done(n+k)}n+=B;batch()},function(){plain()})}
batch()})();`;

const STYLE =
  'body{font-family:system-ui,sans-serif;margin:0;padding:2rem 1rem;color:#1f2328;background:#f6f8fa}' +
  'main{max-width:36rem;margin:0 auto;background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:1.5rem 2rem}' +
  'h1{font-size:1.4rem;margin-top:0}.meta{color:#57606a;font-size:.85rem}';

const sha256Base64 = (text: string) => createHash('sha256').update(text).digest('base64');

/** The page's Content-Security-Policy: nothing but its own inline script and style. */
export const CHALLENGE_CSP =
  `default-src 'none'; script-src 'sha256-${sha256Base64(SCRIPT)}'; style-src 'sha256-${sha256Base64(STYLE)}'; ` +
  "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

export function renderChallengePage(options: {
  challenge: string;
  bits: number;
  returnPath: string;
  supportId: string;
  location: string;
}): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<meta name="robots" content="noindex"><title>Checking your browser</title><style>${STYLE}</style></head>
<body><main>
<h1>Checking your browser</h1>
<p id="tps-status" role="status" aria-live="polite">This site is receiving unusually many requests. Your browser is solving a short puzzle to show that it is not part of an attack; the page you asked for loads by itself in a few seconds.</p>
<noscript><p><strong>JavaScript is needed for this check.</strong> Please allow JavaScript for this site and reload the page. The check sets one cookie for this site only, and sends nothing anywhere else.</p></noscript>
<div id="tps-challenge" data-challenge="${escapeHtml(options.challenge)}" data-bits="${options.bits}" data-return="${escapeHtml(options.returnPath)}"></div>
<p class="meta">Support ID: ${escapeHtml(options.supportId)} &middot; ${escapeHtml(options.location)}</p>
</main><script>${SCRIPT}</script></body></html>
`;
}

/** The script alone (for tests that run it outside a browser). */
export const CHALLENGE_SCRIPT = SCRIPT;
