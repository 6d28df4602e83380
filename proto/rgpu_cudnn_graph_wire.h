/* Constants of the serialized cuDNN descriptor graph (its form is in
 * proto/rgpu_messages.def, at CUDNN_BACKEND_HEUR) that client and server
 * both name. */
#ifndef RGPU_CUDNN_GRAPH_WIRE_H
#define RGPU_CUDNN_GRAPH_WIRE_H

/* An attribute rgpu adds to an engine config that came from a heuristics
 * answer: INT64 x3 = {heuristics mode, position in the answer, the
 * engine's global index}.  cuDNN's heuristics configs carry state that
 * their public attributes do not show (their knob choices read back as -1,
 * "the engine decides"), so a config rebuilt from its attributes runs
 * other kernel variants than the one heuristics gave: the server takes
 * cuDNN's own config from a heuristics run of the same mode on the same
 * operation graph instead.  The value is outside cuDNN's attribute names;
 * the server never sets it on a cuDNN descriptor. */
#define RGPU_CUDNN_ATTR_HEUR_ORIGIN 0x52475055 /* "RGPU" */

#endif
