// What Swift cannot import from FFmpeg's headers by itself: function-like macros, macro constants built
// from expressions, and fixed-size arrays inside structs (imported as tuples). Each helper is a one-liner.
#ifndef TRANSCODERD_CFFMPEG_SHIM_H
#define TRANSCODERD_CFFMPEG_SHIM_H

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <libavformat/avformat.h>
#include <libavcodec/avcodec.h>
#include <libavutil/avutil.h>
#include <libavutil/audio_fifo.h>
#include <libavutil/channel_layout.h>
#include <libavutil/display.h>
#include <libavutil/dovi_meta.h>
#include <libavutil/error.h>
#include <libavutil/hash.h>
#include <libavutil/imgutils.h>
#include <libavutil/mastering_display_metadata.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
#include <libavutil/samplefmt.h>
#include <libswscale/swscale.h>
#include <libswresample/swresample.h>
#include <libavfilter/avfilter.h>
#include <libavfilter/buffersink.h>
#include <libavfilter/buffersrc.h>

static inline int tc_averror(int posixError) { return AVERROR(posixError); }
static inline int tc_averror_eof(void) { return AVERROR_EOF; }
static inline int tc_averror_eagain(void) { return AVERROR(EAGAIN); }
static inline int tc_averror_enomem(void) { return AVERROR(ENOMEM); }
static inline int tc_averror_enospc(void) { return AVERROR(ENOSPC); }
static inline int tc_averror_invaliddata(void) { return AVERROR_INVALIDDATA; }
static inline int tc_averror_exit(void) { return AVERROR_EXIT; }
static inline int64_t tc_nopts_value(void) { return AV_NOPTS_VALUE; }
static inline int tc_time_base(void) { return AV_TIME_BASE; }
static inline uint64_t tc_layout_surround(void) { return AV_CH_LAYOUT_SURROUND; }

/// Writes FFmpeg's text for an error code into buf (what av_err2str does, without the compound literal).
static inline const char *tc_err2str(int code, char *buf, size_t size) {
    av_strerror(code, buf, size);
    return buf;
}

static inline uint8_t *tc_frame_data(const AVFrame *frame, int plane) { return frame->data[plane]; }
static inline int tc_frame_linesize(const AVFrame *frame, int plane) { return frame->linesize[plane]; }
static inline int tc_codec_flag_qscale(void) { return AV_CODEC_FLAG_QSCALE; }
static inline int tc_qp2lambda(void) { return FF_QP2LAMBDA; }
static inline void **tc_frame_extended_data(AVFrame *frame) { return (void **)frame->extended_data; }

/// Rotation of a stream's display matrix in degrees counter-clockwise, or 0 when it has none. A matrix that also
/// mirrors the picture (its determinant is negative: a selfie camera's, a vertical flip) is read as a left-right
/// mirror first, then the rotation returned, and `*mirrored` is set to 1 (else 0). `av_display_rotation_get` alone
/// reads a plain mirror as a half turn, which turns the picture upside down.
static inline double tc_stream_display_transform(const AVStream *stream, int *mirrored) {
    size_t size = 0;
    *mirrored = 0;
    const uint8_t *bytes = av_stream_get_side_data(stream, AV_PKT_DATA_DISPLAYMATRIX, &size);
    if (!bytes || size < 9 * sizeof(int32_t)) return 0;
    int32_t matrix[9];
    memcpy(matrix, bytes, sizeof(matrix));
    double determinant = (double)matrix[0] * matrix[4] - (double)matrix[1] * matrix[3];
    if (determinant < 0) {
        // M = F . R with F the left-right mirror (row vectors: the mirror first): R is M with its first row negated.
        *mirrored = 1;
        matrix[0] = matrix[0] == INT32_MIN ? INT32_MAX : -matrix[0];
        matrix[1] = matrix[1] == INT32_MIN ? INT32_MAX : -matrix[1];
    }
    double angle = av_display_rotation_get(matrix);
    return angle != angle ? 0 : angle;
}

#endif
